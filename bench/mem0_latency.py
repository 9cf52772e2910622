#!/usr/bin/env python3
"""Latency of Mem0's add and search through Mem0's official client against `inferscale serve`.

Usage: MEM0_TELEMETRY=false .venv/bin/python bench/mem0_latency.py --binary build/inferscale
           [--locomo ../shared/data/locomo/locomo10.json] [--conversation 0] [--adds N] [--searches N]
       or  ... --host http://127.0.0.1:8000   (a server already running with --data-dir)

With --binary it starts `inferscale serve` on a fresh data directory (demo model, CPU, BM25, one
thread, loopback) and stops it at the end. Through `mem0ai`'s MemoryClient(api_key, host):
  add:    one message per call (`client.add(text, user_id=U)`, infer left at its default), the
          turns of one LoCoMo conversation in order, as a chat would add them; each add is durable
          (SQLite, synchronous=FULL) when it returns;
  search: the conversation's questions (`client.search(q, filters={"user_id": U}, top_k=10)`)
          over the memories just added.
Each call is timed by the client's wall clock (perf_counter around the call: HTTP over loopback,
JSON, the server's work). Prints count, p50, p90, p99 and mean in ms for both, and, given
--mem0-record (a LoCoMo run of Mem0 OSS with its recorded search times), the p50 of those for
comparison. Quoted in docs/benchmarks-log.md.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("MEM0_TELEMETRY", "false")  # before the import: mem0 reads it then

from mem0 import MemoryClient  # noqa: E402


def percentile(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def summary(name, ms):
    return (f"{name:<8} n={len(ms):<5} p50 {percentile(ms, 50):7.2f} ms   p90 {percentile(ms, 90):7.2f} ms   "
            f"p99 {percentile(ms, 99):7.2f} ms   mean {statistics.fmean(ms):7.2f} ms")


def start_server(binary, work):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(work, "serve.log"), "w")
    proc = subprocess.Popen([binary, "serve", "--data-dir", os.path.join(work, "data"), "--port", str(port),
                             "--threads", "1", "--kv-cache-mb", "64"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    sys.exit("the server did not start: " + open(os.path.join(work, "serve.log")).read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", help="inferscale executable to start (else --host)")
    ap.add_argument("--host", help="a running server's root URL")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--locomo", default=os.path.join(here, "..", "..", "shared", "data", "locomo", "locomo10.json"))
    ap.add_argument("--conversation", type=int, default=0)
    ap.add_argument("--adds", type=int, default=0, help="at most this many turns (0: all)")
    ap.add_argument("--searches", type=int, default=0, help="at most this many questions (0: all)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mem0-record", default=os.path.join(here, "..", "..", "shared", "data", "locomo",
                                                          "mem0_oss_qwen3-14b_conv26_search_top30.json"))
    args = ap.parse_args()
    if bool(args.binary) == bool(args.host):
        sys.exit("give --binary or --host")

    sample = json.load(open(args.locomo))[args.conversation]
    conv = sample["conversation"]
    turns = []
    for n in range(1, 1000):
        if f"session_{n}" not in conv:
            break
        turns += [t["text"] for t in conv[f"session_{n}"] if t.get("text", "").strip()]
    questions = [q["question"] for q in sample["qa"]]
    if args.adds:
        turns = turns[:args.adds]
    if args.searches:
        questions = questions[:args.searches]

    work = tempfile.mkdtemp()
    os.environ.setdefault("MEM0_DIR", os.path.join(work, "mem0"))  # the client's config, not ~/.mem0
    proc = None
    try:
        if args.binary:
            proc, url = start_server(args.binary, work)
        else:
            url = args.host
        client = MemoryClient(api_key="bench", host=url)
        user = f"bench-{os.getpid()}"
        for i in range(args.warmup):  # connections and first-call costs, under another user
            client.add("warm up", user_id=user + "-warmup")
            client.search("warm up", filters={"user_id": user + "-warmup"}, top_k=10)
        client.delete_all(user_id=user + "-warmup")

        add_ms, search_ms = [], []
        for text in turns:
            t0 = time.perf_counter()
            r = client.add(text, user_id=user)
            add_ms.append((time.perf_counter() - t0) * 1e3)
            assert len(r["results"]) == 1, r
        for q in questions:
            t0 = time.perf_counter()
            r = client.search(q, filters={"user_id": user}, top_k=10)
            search_ms.append((time.perf_counter() - t0) * 1e3)
            assert isinstance(r["results"], list), r
        client.delete_all(user_id=user)

        print(f"inferscale {url}, LoCoMo conversation {args.conversation}: {len(turns)} adds of one message, "
              f"then {len(questions)} searches (top_k 10) over them, through mem0ai.MemoryClient")
        print(summary("add", add_ms))
        print(summary("search", search_ms))
        if args.mem0_record and os.path.exists(args.mem0_record):
            rec = [q for runs in json.load(open(args.mem0_record)).values() for q in runs]
            times = [1e3 * q[k] for q in rec for k in ("speaker_1_memory_time", "speaker_2_memory_time") if k in q]
            if times:
                print(f"for comparison, {os.path.basename(args.mem0_record)}: Mem0 OSS search (recorded, "
                      f"another machine) n={len(times)} p50 {percentile(times, 50):.1f} ms")
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
