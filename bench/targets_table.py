#!/usr/bin/env python3
"""Issue 9's targets, read from the logs of scripts/gpu_targets.sh, as one markdown table.

    bench/targets_table.py DIR

DIR holds, per projections setting Q (none = bf16, fp8), what gpu_targets.sh wrote:
  serving_Q.log        bench_cuda_serving --decode-only (table (b): decode steps, 1,024-token contexts)
  mem_Q.log            bench_memory_serving (TTFT at k = 50 in process, 100 users at once, encoding)
  http_Q/http_load/results.json   bench/http_load.py at 1 and 100 clients, k = 50, inject
and device.txt (nvidia-smi's name of the card). A figure whose log is missing or unparsable shows
as "-". The targets are the issue's (H200, bf16 weights); on another card, or with FP8, the row says
which it is, and "met" compares the number with the line all the same.
"""
import json
import os
import re
import sys

# (the figure's key in figures(), name, unit, how it compares, the line)
TARGETS = [
    ("ttft_inject", "TTFT inject, k = 50, in process", "ms", "<=", 5.0),
    ("ttft_p50_1", "TTFT inject, k = 50, over HTTP, p50 at one client", "ms", "<=", 6.0),
    ("text_ratio", "text / inject TTFT, k = 50, in process", "x", ">=", 15.0),
    ("decode_1", "decode step, batch 1", "ms", "<=", 4.3),
    ("rps_100", "100 clients over HTTP, k = 50, 32 tokens", "req/s", ">=", 250.0),
    ("p99_over_p50", "100 clients over HTTP: TTFT p99 / p50", "x", "<=", 3.0),
    ("errors_100", "100 clients over HTTP: errors", "", "<=", 0),
    ("burst", "100 users at once in process, k = 50", "req/s", ">=", 300.0),
]
# Figures that must not get slower: (key, name).
OTHERS = [("decode_32", "decode batch 32 (ms)"), ("ttft_text", "TTFT text, k = 50 (ms)"),
          ("encode", "encoding (facts/s)")]


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def decode_ms(text, batch):
    """Table (b)'s GPU ms of a graphed, PDL decode step on the default kernel choice (auto)."""
    if text is None:
        return None
    for line in text.splitlines():
        c = cells(line)
        if len(c) == 8 and c[0] == str(batch) and c[1].startswith("auto") and c[2] == "on" and c[3] == "on":
            return float(c[5])
    return None


def memory_figures(text):
    """TTFT inject / text at k = 50, the first inject burst's req/s, encoding facts/s."""
    out = {}
    if text is None:
        return out
    for line in text.splitlines():
        c = cells(line)
        if len(c) == 10 and c[0] == "50":
            out["ttft_inject"], out["ttft_text"] = float(c[3]), float(c[4])
        elif len(c) == 5 and c[0].startswith("inject") and "burst" not in out:
            out["burst"] = float(c[2])
        m = re.match(r"Encoding \(write path\): .* ([0-9.]+) facts/s", line)
        if m:
            out["encode"] = float(m.group(1))
    return out


def http_figures(path):
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        return out
    for cell in result.get("cells", []):
        if cell.get("mode") != "inject" or cell.get("k") != 50:
            continue
        if cell.get("clients") == 1:
            out["ttft_p50_1"] = cell["ttft_ms"]["p50"]
        elif cell.get("clients") == 100:
            out["rps_100"] = cell["req_per_s"]
            out["p99_over_p50"] = cell["ttft_ms"]["p99"] / cell["ttft_ms"]["p50"] if cell["ttft_ms"]["p50"] else None
            out["errors_100"] = cell["errors"]
    return out


def figures(d, q):
    """Every figure of setting q by key (TARGETS, OTHERS); a missing one is absent."""
    got = memory_figures(read(os.path.join(d, "mem_%s.log" % q)))
    got.update(http_figures(os.path.join(d, "http_%s" % q, "http_load", "results.json")))
    if got.get("ttft_inject"):
        got["text_ratio"] = got["ttft_text"] / got["ttft_inject"]
    serving = read(os.path.join(d, "serving_%s.log" % q))
    got["decode_1"], got["decode_32"] = decode_ms(serving, 1), decode_ms(serving, 32)
    return got


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, int) or float(v).is_integer() and abs(v) >= 100:
        return "%d" % v
    return "%.2f" % v


def met(v, how, line):
    if v is None:
        return "-"
    return "met" if (v <= line if how == "<=" else v >= line) else "missed"


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    d = sys.argv[1]
    device = (read(os.path.join(d, "device.txt")) or "?").strip()
    quants = [q for q in ("none", "fp8") if os.path.exists(os.path.join(d, "mem_%s.log" % q))
              or os.path.exists(os.path.join(d, "serving_%s.log" % q))]
    if not quants:
        sys.stderr.write("no logs of gpu_targets.sh in %s\n" % d)
        return 1
    names = {"none": "bf16 projections", "fp8": "FP8 projections"}
    got = {q: figures(d, q) for q in quants}
    print("Issue 9's targets on %s (the targets are the H200's with bf16 projections)\n" % device)
    head = ["target", "line"]
    for q in quants:
        head += [names[q], ""]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---|---|" * len(quants))
    for key, name, unit, how, line in TARGETS:
        row = ["%s (%s)" % (name, unit) if unit else name, "%s %s" % (how, fmt(line))]
        for q in quants:
            v = got[q].get(key)
            row += [fmt(v), met(v, how, line)]
        print("| " + " | ".join(row) + " |")
    print("\nNot slower elsewhere (compare with the earlier runs on the same kind of card):\n")
    print("| figure | " + " | ".join(names[q] for q in quants) + " |")
    print("|---|" + "---|" * len(quants))
    for key, name in OTHERS:
        print("| %s | %s |" % (name, " | ".join(fmt(got[q].get(key)) for q in quants)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
