#!/usr/bin/env python3
"""bench/targets_table.py over logs in the formats the benchmarks print (lines of run 29's logs):
the figures it reads, the verdicts, "-" for what is missing, and a clear exit without logs."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "bench", "targets_table.py")

SERVING = """(b) decode: 1024-token contexts, one token per sequence per step
| batch | decode attention | CUDA graphs | PDL | step wall ms | step GPU ms | tokens/s (wall) | tokens/s (GPU) |
|---|---|---|---|---|---|---|---|
| 1 | auto (tiles for one sequence) | on | on | 3.94 | 3.92 | 254 | 255 |
| 1 | auto (tiles for one sequence) | on | off | 4.04 | 4.02 | 248 | 249 |
| 1 | tensor-core decode kernel | on | on | 3.84 | 3.82 | 261 | 262 |
| 32 | auto (tiles for one sequence) | off | on | 6.17 | 6.14 | 5189 | 5213 |
| 32 | auto (tiles for one sequence) | on | on | 5.93 | 5.88 | 5400 | 5446 |
"""
MEMORY = """Encoding (write path): 419 facts, 69198 tokens through the model (window included) in 1190.2 ms: 352 facts/s, 58141 tokens/s; 1643 pool blocks held

| k | prompt tokens | injected | TTFT inject (ms) | TTFT text (ms) | text / inject | prepare (ms) | retrieval (ms) | residency (ms) | inject: GPU (ms) |
|---|---|---|---|---|---|---|---|---|---|
| 50 | 2733 | 2702 | 6.13 | 56.41 | 9.20x | 0.55 | 0.17 | 0.31 | 5.25 |

| mode | wall (s) | requests/s | output tokens/s | mean TTFT (ms) |
|---|---|---|---|---|
| inject | 0.47 | 211.9 | 6781 | 116.9 |
| text | 5.72 | 17.5 | 560 | 2791.0 |
"""


def cell(clients, rps, p50, p99, errors):
    return {"mode": "inject", "k": 50, "clients": clients, "req_per_s": rps, "errors": errors,
            "ttft_ms": {"p50": p50, "p99": p99}}


def run(d):
    p = subprocess.run([sys.executable, TOOL, d], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def row(out, name):
    for line in out.splitlines():
        if line.startswith("| " + name):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    raise AssertionError("no row %r in:\n%s" % (name, out))


def main():
    with tempfile.TemporaryDirectory() as d:
        code, _, err = run(d)
        assert code == 1 and "no logs" in err, (code, err)

        with open(os.path.join(d, "device.txt"), "w") as f:
            f.write("NVIDIA H200\n")
        with open(os.path.join(d, "serving_fp8.log"), "w") as f:
            f.write(SERVING)
        with open(os.path.join(d, "mem_fp8.log"), "w") as f:
            f.write(MEMORY)
        os.makedirs(os.path.join(d, "http_fp8", "http_load"))
        with open(os.path.join(d, "http_fp8", "http_load", "results.json"), "w") as f:
            json.dump({"cells": [cell(1, 7.0, 5.9, 19.5, 0), cell(100, 260.0, 40.0, 160.0, 2),
                                 dict(cell(100, 999.0, 1.0, 1.0, 0), k=5)]}, f)
        with open(os.path.join(d, "mem_none.log"), "w") as f:  # bf16: only the in-process figures
            f.write(MEMORY.replace("| 6.13 | 56.41 |", "| 8.12 | 77.49 |"))
        code, out, err = run(d)
        assert code == 0, (code, out, err)
        assert "on NVIDIA H200" in out, out
        # bf16 columns first, then FP8: value, verdict.
        assert row(out, "TTFT inject, k = 50, in process")[2:] == ["8.12", "missed", "6.13", "missed"]
        assert row(out, "TTFT inject, k = 50, over HTTP")[2:] == ["-", "-", "5.90", "met"]
        assert row(out, "text / inject TTFT")[2:] == ["9.54", "missed", "9.20", "missed"]
        assert row(out, "decode step, batch 1")[2:] == ["-", "-", "3.92", "met"]  # auto, graphs and PDL on
        assert row(out, "100 clients over HTTP, k = 50")[2:] == ["-", "-", "260", "met"]  # not the k = 5 cell
        assert row(out, "100 clients over HTTP: TTFT p99")[2:] == ["-", "-", "4.00", "missed"]
        assert row(out, "100 clients over HTTP: errors")[2:] == ["-", "-", "2", "missed"]
        assert row(out, "100 users at once in process")[2:] == ["211.90", "missed", "211.90", "missed"]
        assert row(out, "decode batch 32")[1:] == ["-", "5.88"]
        assert row(out, "encoding (facts/s)")[1:] == ["352", "352"]
    print("targets_table: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
