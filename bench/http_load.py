#!/usr/bin/env python3
"""HTTP load benchmark of `inferscale serve` with per-user memory, driven as applications drive it.

What it does, in order:
1. Imports LoCoMo's conversations (all 10 by default) as 10 users through the memory REST API,
   the turns as conversation turns with their session dates (bench/locomo_eval.py's import; a
   user that already holds exactly those turns is kept). Skipped with --no-import.
2. Warm-up: one non-streamed inject request per question at the largest k of the grid (1 output
   token), so the facts every measured request retrieves are encoded before any cell (with k nested,
   the smaller k's facts are among them). Skipped with --no-warmup.
3. The grid: per (output tokens, mode, k, clients) one cell of N closed-loop clients: each client
   streams a chat request with `memory` {user, mode, k, w, query}, and sends its next one as soon
   as the previous one ends. The requests are the non-adversarial LoCoMo questions (categories 1-4),
   interleaved over the users, with `ignore_eos: true` so every answer has exactly the asked tokens.
   A cell runs until every client has finished its first request (that moment starts the
   measurement window: the first, synchronized burst is not measured), then --duration more seconds
   and at least --min-requests completions (at most --max-cell-seconds in all); the requests still
   in flight at the end are cut (their connections closed) and not counted. With --requests R each
   client sends R requests after its first instead and the window ends with the last.
4. Reports per cell: TTFT p50/p95/p99 (client side: from sending the request to the first chunk
   with content), inter-token latency p50/p99 (gaps between content chunks), end-to-end latency,
   req/s and output tokens/s in the window, errors by kind (a non-200 status, an error event, a
   timeout, a broken connection, an answer without the asked tokens: every one in the cell, the
   unmeasured first requests included), fallbacks (the `memory` report's `fallback`, by reason),
   facts encoded / loaded during the cell, and cached (prefix-cache) prompt tokens.
5. Writes DIR/results.json, DIR/results.md (a markdown table) and, with matplotlib,
   DIR/ttft_vs_k.png (TTFT against k per mode) and DIR/reqs_vs_clients.png (req/s against clients
   per mode). A rerun with the same --out skips the cells already in results.json (--resume).

--cold-burst N replaces 2-5: after the import (and, with --background-wait, after the server's
background encoding drained), N inject requests at once beside a few running plain chats; it
reports their TTFT, the facts they encoded on demand and the running chats' inter-token gaps
(DIR/cold_burst.json).

The clients are asyncio tasks over keep-alive HTTP/1.1 connections (one per client), spread over
--procs worker processes so the client is not the bottleneck: `--self-test` measures its overhead
against a trivial in-file SSE server (no model) and prints what one worker process can drive.

Only the standard library (matplotlib for the plots; without it the PNGs are skipped and
`--plot-only DIR` draws them later elsewhere). Travels as three files: this one, bench/locomo_eval.py
beside it (imported), and LoCoMo's locomo10.json.

CPU (the demo model or SmolLM2; a small grid):

    build/inferscale serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --data-dir /tmp/load-data \\
        --window 2 --kv-files --memory-pool-mb 2048 --port 8000 &
    bench/http_load.py --base-url http://127.0.0.1:8000 --clients 1,4 --k 5,20 --tokens 32 \\
        --max-questions 8 --duration 20 --min-requests 8 --out results/http-load-cpu

GPU, the whole grid (H200; Llama-3.1-8B shapes, random bf16 weights, the Mistral v3 tokenizer;
scripts/gpu_bundle.sh puts inferscale, its libraries, this script, locomo_eval.py and the data in
.gpu/cuda). Two runs on the GPU host, one per output length, each within 10 minutes
(--max-seconds stops starting cells in time; a rerun of the same call with the same --out resumes,
while the machine is warm):

    run(carry=[".gpu/cuda"], command="cd .gpu/cuda && export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD && \\
        python3 http_load.py --data data/locomo10.json --tokens 32 --max-seconds 540 --out $OUT/load32 \\
        --serve './inferscale serve --model data/Llama-3.1-8B.json --random-weights --random-dtype bf16 \\
                 --tokenizer data/tokenizer.model.v3 --device cuda --data-dir /tmp/load-data --window 2 \\
                 --kv-cache-mb 40960 --memory-pool-mb 49152 --max-num-seqs 256 --max-pending 1024 --port {port}'")
    (the same with --tokens 128 --out $OUT/load128), then here: bench/http_load.py --merge DIR1 DIR2 --out DIR
    (tables and plots of both; also --plot-only DIR where the GPU machine had no matplotlib).

The default grid is the whole one: --clients 1,10,50,100,200 --modes inject,text --k 5,10,20,50
--tokens 32,128, all 10 conversations, every non-adversarial question, w = 2. The pool must hold the
facts the questions retrieve at k = 50 (about 40 GB of bf16 KV for the 8B shape: --memory-pool-mb
49152), else inject cells encode during the run (their `encoded` column says so). --max-num-seqs
must be at least the largest N, or requests queue in the server.

Before the real run, on the same machine: `python3 http_load.py --self-test` (client overhead at
200 clients, ~30 s).
"""
import argparse
import asyncio
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import locomo_eval  # the LoCoMo import, questions and prompt (one copy of that code)
except ImportError:  # pragma: no cover
    locomo_eval = None

now = time.perf_counter  # CLOCK_MONOTONIC on Linux: one clock for every process of the run
STARTED = time.time()  # --max-seconds counts from here (server start, import and warm-up included)
RESULTS = "results.json"

# ---------------------------------------------------------------------------------------------
# A minimal asyncio HTTP/1.1 client: one keep-alive connection, chunked bodies read as they come.


class HttpConn:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None
        self.used = False  # a request was answered on it: the server may have closed it since

    async def _open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.used = False

    def close(self):
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def send(self, head, body):
        """Sends one request (head: the request line and headers, without Content-Length) and reads
        the status line and headers. A connection the server closed while idle is reopened once."""
        data = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        for attempt in (0, 1):
            if self.writer is None:
                await self._open()
            reused = self.used
            try:
                self.writer.write(data)
                line = await self.reader.readline()
                if not line:
                    raise ConnectionResetError("the server closed the connection before answering")
            except (ConnectionError, OSError):
                self.close()
                if reused and attempt == 0:
                    continue
                raise
            parts = line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
                self.close()
                raise ConnectionError("not an HTTP status line: %r" % line[:80])
            status = int(parts[1])
            headers = {}
            while True:
                h = await self.reader.readline()
                if h in (b"\r\n", b"\n"):
                    break
                if not h:
                    self.close()
                    raise ConnectionResetError("the connection closed in the headers")
                name, _, value = h.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            return status, headers
        raise ConnectionError("unreachable")

    async def body(self, headers):
        """The body's pieces as they arrive (one per HTTP chunk); leaves the connection ready for the
        next request, or closed when the server said so."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                line = await self.reader.readline()
                if not line:
                    self.close()
                    raise ConnectionResetError("the connection closed in a chunked body")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await self.reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                piece = await self.reader.readexactly(size + 2)
                yield piece[:-2]
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if n:
                yield await self.reader.readexactly(n)
        else:
            while True:
                piece = await self.reader.read(1 << 16)
                if not piece:
                    break
                yield piece
            self.close()
            return
        if headers.get("connection", "").lower() == "close":
            self.close()
        else:
            self.used = True


def error_kind(status, body):
    """'http 429 overloaded' from an OpenAI-style error body (or the status alone)."""
    try:
        e = json.loads(body)["error"]
        return "http %d %s" % (status, e.get("code") or e.get("type") or "")
    except (ValueError, KeyError, TypeError):
        return "http %d" % status


async def stream_chat(conn, head, body, max_tokens):
    """One streamed chat request. Returns its record: times (perf_counter), tokens, the memory
    report's fields, and 'error' (a kind) when it failed."""
    r = {"start": now(), "first": None, "end": None, "tokens": 0, "gaps": [], "error": None}
    try:
        status, headers = await conn.send(head, body)
    except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
        r["error"] = "connection: %s" % type(e).__name__
        r["end"] = now()
        return r
    if status != 200:
        data = b""
        async for piece in conn.body(headers):
            data += piece
        r["error"] = error_kind(status, data)
        r["retry_after"] = float(headers.get("retry-after") or 0)
        r["end"] = now()
        return r
    buf = b""
    last = None
    usage = mem = None
    lags = []
    done = False
    try:
        async for piece in conn.body(headers):
            t = now()
            buf += piece
            while True:
                i = buf.find(b"\n\n")
                if i < 0:
                    break
                event, buf = buf[:i], buf[i + 2:]
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    obj = json.loads(data)
                    if "error" in obj:
                        e = obj["error"] or {}
                        r["error"] = "stream error: %s" % (e.get("code") or e.get("type") or e.get("message", "")[:60])
                        continue
                    if "_sent" in obj:  # the self-test server's send time
                        lags.append(t - obj["_sent"])
                    if obj.get("memory") is not None:
                        mem = obj["memory"]
                    if obj.get("usage"):
                        usage = obj["usage"]
                    ch = obj.get("choices")
                    if ch:
                        c = ch[0]
                        text = c["delta"].get("content") if "delta" in c else c.get("text")
                        if text:
                            if last is None:
                                r["first"] = t
                            else:
                                r["gaps"].append(t - last)
                            last = t
    except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError) as e:
        conn.close()
        r["error"] = r["error"] or "connection: %s" % type(e).__name__
    r["end"] = now()
    if lags:
        r["lags"] = lags
    if mem is not None:
        r["memory"] = {key: mem.get(key) for key in ("mode", "fallback", "encoded", "loaded", "injected_tokens")}
    if usage:
        r["tokens"] = usage.get("completion_tokens", 0)
        r["prompt_tokens"] = usage.get("prompt_tokens", 0)
        r["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if r["error"] is None:
        if not done:
            r["error"] = "stream ended without [DONE]"
        elif usage is None:
            r["error"] = "no usage chunk"
        elif r["first"] is None:
            r["error"] = "no content"
        elif r["tokens"] != max_tokens:
            r["error"] = "short answer (ignore_eos)"
    return r


# ---------------------------------------------------------------------------------------------
# Worker processes: each runs its share of a cell's clients in one event loop.


def request_head(root, host, port, headers):
    lines = ["POST %s/v1/chat/completions HTTP/1.1" % root, "Host: %s:%d" % (host, port),
             "Content-Type: application/json", "Accept: text/event-stream"]
    lines += ["%s: %s" % kv for kv in headers.items()]
    return ("\r\n".join(lines) + "\r\n").encode()


def request_body(model, user, question, cell, prompt):
    memory = {"user": user, "mode": cell["mode"], "k": cell["k"], "w": cell["w"], "query": question}
    return json.dumps({"model": model, "messages": [{"role": "user", "content": prompt.format(question)}],
                       "max_tokens": cell["tokens"], "ignore_eos": True, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "memory": memory}).encode()


class Worker:
    def __init__(self, pipe, target):
        self.pipe = pipe
        self.host, self.port, self.root, self.headers = target
        self.conns = {}  # client id -> HttpConn, kept across cells (keep-alive, as an application)

    async def run_cell(self, spec):
        cell, clients, jobs, offset, n_all = spec["cell"], spec["clients"], spec["jobs"], spec["offset"], spec["n"]
        head = request_head(self.root, self.host, self.port, self.headers)
        records, state = [], {"first": 0, "done": 0, "stop": False}
        per_client = spec.get("requests")  # None: until stopped

        async def client(c):
            conn = self.conns.setdefault(c, HttpConn(self.host, self.port))
            j = 0
            while not state["stop"] and (per_client is None or j <= per_client):
                user, question = jobs[(offset + c + j * n_all) % len(jobs)]
                body = request_body(spec["model"], user, question, cell, spec["prompt"])
                t = now()
                try:
                    r = await asyncio.wait_for(stream_chat(conn, head, body, cell["tokens"]), spec["timeout"])
                except asyncio.CancelledError:
                    conn.close()  # the server sees the client go and cancels the request
                    raise
                except Exception as e:  # a timeout, or anything unforeseen: counted, and the client goes on
                    conn.close()
                    kind = "timeout (%gs)" % spec["timeout"] if isinstance(e, asyncio.TimeoutError) else \
                        "client: %s: %s" % (type(e).__name__, str(e)[:80])
                    r = {"start": t, "first": None, "end": now(), "tokens": 0, "gaps": [], "error": kind}
                r["client"], r["seq"] = c, j
                records.append(r)
                state["done"] += 1
                if j == 0:
                    state["first"] += 1
                j += 1
                if r.get("retry_after"):
                    await asyncio.sleep(min(r["retry_after"], 1.0))

        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(max(0.0, spec["t0"] - now()))
        tasks = [asyncio.ensure_future(client(c)) for c in clients]
        stopped = None
        while not all(t.done() for t in tasks):
            self.pipe.send(("progress", state["first"], state["done"]))
            if self.pipe.poll():  # never blocks: the loop must stay free for the clients
                msg = self.pipe.recv()
                if msg[0] == "stop":
                    stopped = msg[1]
                    state["stop"] = True
                    break
            await asyncio.sleep(0.05)
        cut = 0
        for t in tasks:
            if not t.done():
                t.cancel()
                cut += 1
        await asyncio.gather(*tasks, return_exceptions=True)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        if stopped is None:  # every client ended by itself (--requests)
            self.pipe.send(("progress", state["first"], state["done"]))
            while self.pipe.recv()[0] != "stop":
                pass
        self.pipe.send(("done", records, cpu, cut))

    async def main(self):
        while True:
            msg = await asyncio.get_event_loop().run_in_executor(None, self.pipe.recv)
            if msg[0] == "quit":
                break
            await self.run_cell(msg[1])


def worker_main(pipe, target):
    asyncio.run(Worker(pipe, target).main())


class Pool:
    """--procs worker processes; a cell's clients are spread over them round-robin."""

    def __init__(self, procs, target):
        ctx = multiprocessing.get_context("fork")
        self.pipes, self.procs = [], []
        for _ in range(procs):
            a, b = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(b, target), daemon=True)
            p.start()
            self.pipes.append(a)
            self.procs.append(p)

    def close(self):
        for a in self.pipes:
            a.send(("quit",))
        for p in self.procs:
            p.join(5)

    def run_cell(self, spec, duration, min_requests, max_seconds):
        """Runs one cell; returns (records, client CPU seconds, requests cut, t0, t_stop, capped)."""
        n = spec["n"]
        active = [i for i in range(len(self.pipes)) if i < n]
        t0 = now() + 0.1
        for i in active:
            s = dict(spec, clients=[c for c in range(n) if c % len(self.pipes) == i], t0=t0)
            self.pipes[i].send(("cell", s))
        first, done = {i: 0 for i in active}, {i: 0 for i in active}
        warm_at, warm_done = None, 0
        capped = False
        t_stop = None
        by_self = spec.get("requests") is not None
        while t_stop is None:
            for a in multiprocessing.connection.wait([self.pipes[i] for i in active], 0.05):
                i = self.pipes.index(a)
                msg = a.recv()
                if msg[0] == "progress":
                    first[i], done[i] = msg[1], msg[2]
            t = now()
            total = sum(done.values())
            if warm_at is None and sum(first.values()) == n:
                warm_at, warm_done = t, total
            if by_self:
                if total == n * (spec["requests"] + 1):
                    t_stop = t
            elif warm_at is not None and t >= warm_at + duration and total - warm_done >= min_requests:
                t_stop = t
            if t_stop is None and t >= t0 + max_seconds:
                t_stop, capped = t, True
        for i in active:
            self.pipes[i].send(("stop", t_stop))
        records, cpu, cut = [], 0.0, 0
        pending = set(active)
        while pending:
            for a in multiprocessing.connection.wait([self.pipes[i] for i in pending]):
                i = self.pipes.index(a)
                msg = a.recv()
                if msg[0] == "done":
                    records += msg[1]
                    cpu += msg[2]
                    cut += msg[3]
                    pending.discard(i)
        return records, cpu, cut, t0, t_stop, capped


# ---------------------------------------------------------------------------------------------
# Statistics


def pct(values, p):
    """The p-th percentile with linear interpolation (numpy's default); None when empty."""
    if not values:
        return None
    v = sorted(values)
    x = (len(v) - 1) * p / 100.0
    lo = int(math.floor(x))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (x - lo)


def ms(x):
    return None if x is None else round(x * 1000.0, 3)


def summarize_cell(cell, records, cpu, cut, t0, t_stop, capped, requests_mode):
    firsts = [r["end"] for r in records if r["seq"] == 0]
    steady = len(firsts) == cell["clients"]
    t_warm = max(firsts) if steady else t0
    if requests_mode:
        t_stop = max(r["end"] for r in records)
    window = [r for r in records if t_warm < r["end"] <= t_stop and r["seq"] > 0] if steady else \
        [r for r in records if r["end"] <= t_stop]
    ok = [r for r in window if r["error"] is None]
    span = max(1e-9, t_stop - t_warm)
    errors = {}
    for r in records:
        if r["error"] is not None:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    fallbacks = {}
    for r in records:
        fb = (r.get("memory") or {}).get("fallback")
        if fb:
            fallbacks[fb] = fallbacks.get(fb, 0) + 1
    ttft = [r["first"] - r["start"] for r in ok]
    e2e = [r["end"] - r["start"] for r in ok]
    gaps = [g for r in ok for g in r["gaps"]]
    tpot = [(r["end"] - r["first"]) / (r["tokens"] - 1) for r in ok if r["tokens"] > 1]
    lags = [x for r in records for x in r.get("lags", [])]
    chunks = sum(len(r["gaps"]) + 1 for r in records if r["first"] is not None)
    mem = [r["memory"] for r in window if r.get("memory")]
    out = dict(cell)
    out.update({
        "requests": len(ok), "window_s": round(span, 3), "steady": steady, "capped": capped,
        "req_per_s": round(len(ok) / span, 3), "output_tok_per_s": round(sum(r["tokens"] for r in ok) / span, 1),
        "ttft_ms": {"p50": ms(pct(ttft, 50)), "p95": ms(pct(ttft, 95)), "p99": ms(pct(ttft, 99)),
                    "mean": ms(sum(ttft) / len(ttft)) if ttft else None},
        "itl_ms": {"p50": ms(pct(gaps, 50)), "p99": ms(pct(gaps, 99))},
        "tpot_ms_mean": ms(sum(tpot) / len(tpot)) if tpot else None,
        "e2e_ms": {"p50": ms(pct(e2e, 50)), "p99": ms(pct(e2e, 99))},
        "errors": sum(errors.values()), "error_kinds": errors,
        "fallbacks": sum(fallbacks.values()), "fallback_reasons": fallbacks,
        "mode_served_other": sum(1 for m in mem if m.get("mode") != cell["mode"]),
        "facts_encoded": sum(m.get("encoded") or 0 for m in mem),
        "facts_loaded": sum(m.get("loaded") or 0 for m in mem),
        "prompt_tokens_mean": round(sum(r.get("prompt_tokens", 0) for r in ok) / len(ok), 1) if ok else None,
        "injected_tokens_mean": round(sum(m.get("injected_tokens") or 0 for m in mem) / len(mem), 1) if mem else None,
        "cached_tokens_mean": round(sum(r.get("cached_tokens", 0) for r in ok) / len(ok), 1) if ok else None,
        "requests_all": len(records), "requests_cut_at_end": cut,
        "client_cpu_s": round(cpu, 3), "client_chunks": chunks,
        "client_cpu_us_per_chunk": round(cpu / chunks * 1e6, 2) if chunks else None,
    })
    if lags:
        out["client_lag_ms"] = {"p50": ms(pct(lags, 50)), "p99": ms(pct(lags, 99)), "max": ms(max(lags))}
    return out


def cell_key(c):
    return (c["mode"], c["k"], c["w"], c["tokens"], c["clients"])


# ---------------------------------------------------------------------------------------------
# Tables and plots


def fmt(v, nd=1):
    if v is None:
        return ""
    if isinstance(v, float):
        return "%.*f" % (nd, v)
    return str(v)


def markdown(cells):
    cols = ["mode", "k", "tokens", "clients", "requests", "req/s", "out tok/s", "TTFT p50", "TTFT p95", "TTFT p99",
            "ITL p50", "ITL p99", "errors", "fallbacks", "encoded", "cached tok/req", "TTFT mean (all)",
            "server TTFT mean", "forwards decode / mixed / prefill", "their mean ms",
            "host ms a forward: before / launch / after"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for c in sorted(cells, key=lambda c: (c["tokens"], c["mode"] != "inject", c["k"], c["clients"])):
        t, i = c["ttft_ms"], c["itl_ms"]
        row = [c["mode"], c["k"], c["tokens"], c["clients"], c["requests"] if c["steady"] else "%d*" % c["requests"],
               fmt(c["req_per_s"], 2), fmt(c["output_tok_per_s"], 0), fmt(t["p50"]), fmt(t["p95"]), fmt(t["p99"]),
               fmt(i["p50"], 2), fmt(i["p99"], 2), c["errors"], c["fallbacks"], c["facts_encoded"],
               fmt(c["cached_tokens_mean"], 0), fmt(c.get("ttft_all_ms_mean"), 2), fmt(c.get("server_ttft_ms_mean"), 2),
               *forwards_text(c)]
        lines.append("| " + " | ".join(str(x) for x in row) + " |")
    lines.append("")
    lines.append("Times in ms; TTFT client-side (request sent -> first content chunk); ITL = gaps between content "
                 "chunks; `encoded` = facts encoded on demand during the measured window; `*` = the cell ended "
                 "(--max-cell-seconds) before every client finished its first request; the two means are over "
                 "every request of the cell, client-side and in the server (/metrics: arrival in the engine -> "
                 "first token); the engine's forwards during the cell by kind (/metrics; mixed: arrivals' "
                 "prefills beside running decodes) and their mean wall time, launch to end; the engine "
                 "thread's host time a forward (/metrics) before its launch (scheduling, the batch), in it "
                 "(planning, uploads, launches) and after it (sampling, outputs).")
    return "\n".join(lines) + "\n"


def plots(cells, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("http_load: no matplotlib here: plots skipped (bench/http_load.py --plot-only %s)\n" % out_dir)
        return []
    cells = [c for c in cells if c["requests"] > 0]
    tokens = sorted({c["tokens"] for c in cells})
    clients = sorted({c["clients"] for c in cells})
    modes = [m for m in ("inject", "text") if any(c["mode"] == m for c in cells)]
    modes += sorted({c["mode"] for c in cells} - set(modes))
    ks = sorted({c["k"] for c in cells})
    colors = {m: "C%d" % i for i, m in enumerate(modes)}
    written = []

    def save(fig, title, name):
        fig.suptitle(title)
        fig.tight_layout()
        written.append(os.path.join(out_dir, name))
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    fig, axes = plt.subplots(len(tokens), len(clients), figsize=(3.6 * len(clients), 3.2 * len(tokens)),
                             squeeze=False, sharex=True)
    for ti, tok in enumerate(tokens):
        for ci, n in enumerate(clients):
            ax = axes[ti][ci]
            for m in modes:
                cs = sorted((c for c in cells if c["mode"] == m and c["tokens"] == tok and c["clients"] == n),
                            key=lambda c: c["k"])
                if not cs:
                    continue
                x = [c["k"] for c in cs]
                ax.plot(x, [c["ttft_ms"]["p50"] for c in cs], "o-", color=colors[m], label=m + " p50")
                ax.plot(x, [c["ttft_ms"]["p99"] for c in cs], "x--", color=colors[m], alpha=0.6, label=m + " p99")
            ax.set_yscale("log")
            ax.set_title("%d client%s, %d tokens" % (n, "" if n == 1 else "s", tok), fontsize=9)
            ax.set_xticks(ks)
            ax.grid(True, which="both", alpha=0.3)
            if ci == 0:
                ax.set_ylabel("TTFT (ms)")
            if ti == len(tokens) - 1:
                ax.set_xlabel("k (facts)")
    axes[0][0].legend(fontsize=7)
    save(fig, "TTFT against k per mode (client side, over HTTP)", "ttft_vs_k.png")

    fig, axes = plt.subplots(1, len(tokens), figsize=(5.0 * len(tokens), 4.0), squeeze=False)
    styles = {m: s for m, s in zip(modes, ["-", "--", ":", "-."])}
    for ti, tok in enumerate(tokens):
        ax = axes[0][ti]
        for m in modes:
            for ki, k in enumerate(ks):
                cs = sorted((c for c in cells if c["mode"] == m and c["tokens"] == tok and c["k"] == k),
                            key=lambda c: c["clients"])
                if cs:
                    ax.plot([c["clients"] for c in cs], [c["req_per_s"] for c in cs], styles[m], marker="o",
                            color="C%d" % ki, label="%s k=%d" % (m, k))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(clients)
        ax.set_xticklabels([str(n) for n in clients])
        ax.set_xlabel("concurrent streaming clients")
        ax.set_ylabel("requests/s")
        ax.set_title("%d output tokens" % tok, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, "Throughput against clients per mode (over HTTP)", "reqs_vs_clients.png")
    return written


def publish(result, out_dir):
    """results.json and results.md written, the table printed, the plots drawn."""
    write_outputs(result, out_dir)
    print(markdown(result["cells"]))
    for p in plots(result["cells"], out_dir):
        print("wrote " + p)


def write_outputs(result, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, RESULTS + ".tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, RESULTS))
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown(result["cells"]))


# ---------------------------------------------------------------------------------------------
# The server: its URL, an optional process of ours, setup (import, warm-up)


class Target:
    def __init__(self, base_url, api_key, tenant):
        u = urllib.parse.urlparse(base_url)
        if u.scheme != "http":
            sys.exit("http_load: only http:// URLs (got %s)" % base_url)
        self.base_url = base_url
        self.host, self.port = u.hostname, u.port or 80
        self.root = u.path.rstrip("/")
        if self.root.endswith("/v1"):
            self.root = self.root[:-3]
        self.headers = {"X-InferScale-Tenant": tenant}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def url(self, path):
        return "http://%s:%d%s%s" % (self.host, self.port, self.root, path)

    def get(self, path, timeout=10):
        req = urllib.request.Request(self.url(path), headers=self.headers)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()

    def worker_target(self):
        return (self.host, self.port, self.root, dict(self.headers))


def start_server(cmd, target, log_path, timeout):
    cmd = cmd.replace("{port}", str(target.port))
    try:  # a server already there (another run's, still draining) would answer our /health checks
        target.get("/health", timeout=2)
        sys.exit("http_load: something already answers on port %d; --serve needs a free --base-url port" % target.port)
    except OSError:
        pass
    log = open(log_path, "w")
    sys.stderr.write("http_load: starting %s\n" % cmd)
    p = subprocess.Popen(cmd, shell=True, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    t = time.time()
    while time.time() - t < timeout:
        if p.poll() is not None:
            log.close()
            sys.exit("http_load: the server exited (%d) before answering /health:\n%s" % (
                p.returncode, open(log_path).read()[-4000:]))
        try:
            target.get("/health", timeout=2)
            return p
        except OSError:
            time.sleep(0.5)
    stop_server(p)
    sys.exit("http_load: the server did not answer /health within %ds (log: %s)" % (timeout, log_path))


def stop_server(p):
    if p is None or p.poll() is not None:
        return
    os.killpg(p.pid, signal.SIGTERM)  # the process group of the shell we started, ours alone
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def need_locomo_eval():
    if locomo_eval is None:
        sys.exit("http_load: needs bench/locomo_eval.py beside it (the LoCoMo import and questions)")
    return locomo_eval


def make_jobs(convs, max_questions):
    """(user, question) of every non-adversarial question, interleaved over the users so that
    consecutive requests (and concurrent clients) ask different users."""
    le = need_locomo_eval()
    per_user = [[(c["sample_id"], q["question"]) for _, q in le.questions_of(c, max_questions)] for c in convs]
    jobs = []
    for i in range(max(len(u) for u in per_user)):
        jobs += [u[i] for u in per_user if i < len(u)]
    return jobs


def import_users(target, api_key, tenant, convs):
    le = need_locomo_eval()
    client = le.Client(target.base_url, api_key)
    client.headers["X-InferScale-Tenant"] = tenant
    t = time.time()
    imported = [c["sample_id"] for c in convs if le.import_conversation(client, c)]
    return {"imported": imported, "kept": [c["sample_id"] for c in convs if c["sample_id"] not in imported],
            "turns": sum(len(le.turns_of(c)) for c in convs), "seconds": round(time.time() - t, 2)}


def warm_up(target, api_key, tenant, model, jobs, k, w, prompt, concurrency):
    """One non-streamed inject request per question at k (1 token): encodes every fact the grid's
    requests retrieve (for k up to this one) before any cell is measured."""
    le = need_locomo_eval()
    client = le.Client(target.base_url, api_key)
    client.headers["X-InferScale-Tenant"] = tenant
    stats = {"requests": len(jobs), "k": k, "w": w, "errors": 0, "error_examples": [], "facts_encoded": 0,
             "facts_loaded": 0, "fallbacks": 0}

    def one(job):
        user, question = job
        body = {"model": model, "messages": [{"role": "user", "content": prompt.format(question)}], "max_tokens": 1,
                "temperature": 0, "memory": {"user": user, "mode": "inject", "k": k, "w": w, "query": question}}
        try:
            return client.request("POST", "/v1/chat/completions", body)
        except Exception as e:  # the connection failed through every retry: counted
            return 0, {"error": "%s: %s" % (type(e).__name__, e)}

    t = time.time()
    done = 0
    with ThreadPoolExecutor(concurrency) as ex:
        for status, j in ex.map(one, jobs):
            done += 1
            if status != 200:
                stats["errors"] += 1
                if len(stats["error_examples"]) < 5:
                    stats["error_examples"].append("%d %s" % (status, json.dumps(j)[:200]))
                continue
            m = j.get("memory") or {}
            stats["facts_encoded"] += m.get("encoded") or 0
            stats["facts_loaded"] += m.get("loaded") or 0
            stats["fallbacks"] += 1 if m.get("fallback") else 0
            if done % max(1, min(50, len(jobs) // 20)) == 0 or done == len(jobs):
                sys.stderr.write("\rwarm-up: %d/%d requests, %d facts encoded, %.0f s" % (
                    done, len(jobs), stats["facts_encoded"], time.time() - t))
    sys.stderr.write("\n")
    stats["seconds"] = round(time.time() - t, 2)
    return stats


def read_metrics(target, *names):
    """The named metrics from one /metrics read, each summed over its labels (None where absent, or
    all None when the server does not answer)."""
    try:
        text = target.get("/metrics").decode()
    except OSError:
        return [None] * len(names)
    totals = [None] * len(names)
    for line in text.splitlines():
        for i, name in enumerate(names):
            if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
                totals[i] = (totals[i] or 0.0) + float(line.rsplit(None, 1)[1])
    return totals


def read_metric(target, name):
    return read_metrics(target, name)[0]


TTFT_METRIC = "inferscale_time_to_first_token_seconds"
FORWARD_KINDS = ("decode", "mixed", "prefill")
HOST_PHASES = ("before", "launch", "after")


def server_snapshot(target):
    """From one /metrics read (consistent): the server's TTFT histogram's (sum of seconds, count)
    (arrival in the engine -> first token) under "ttft", and its engine forwards by kind, (count,
    wall seconds), under "forwards"; None where /metrics does not have them (another server)."""
    names = [TTFT_METRIC + "_sum", TTFT_METRIC + "_count"]
    for kind in FORWARD_KINDS:
        names += ['inferscale_engine_forwards_total{kind="%s"}' % kind,
                  'inferscale_engine_forward_seconds_total{kind="%s"}' % kind]
    nf = len(names)
    names += ['inferscale_engine_host_seconds_total{phase="%s"}' % p for p in HOST_PHASES]
    v = read_metrics(target, *names)
    snap = {"ttft": None if v[0] is None or v[1] is None else (v[0], v[1]), "forwards": None, "host": None}
    if all(x is not None for x in v[2:nf]):
        snap["forwards"] = {kind: (v[2 + 2 * i], v[3 + 2 * i]) for i, kind in enumerate(FORWARD_KINDS)}
    if all(x is not None for x in v[nf:]):
        snap["host"] = dict(zip(HOST_PHASES, v[nf:]))
    return snap


def add_server_side(cell, records, before, after):
    """The cell's mean TTFT on both sides, over every request of the cell that got a first token (the
    server's histogram cannot tell the measured window from the warm-up and the cut requests):
    client minus server is what HTTP, the handler and the client add. And the engine's forwards
    during the cell by kind, with their mean wall time (mixed: arrivals' prefills beside decodes)."""
    firsts = [r["first"] - r["start"] for r in records if r["first"] is not None]
    cell["ttft_all_ms_mean"] = ms(sum(firsts) / len(firsts)) if firsts else None
    b, a = before["ttft"], after["ttft"]
    if b is not None and a is not None and a[1] > b[1]:
        cell["server_ttft_ms_mean"] = ms((a[0] - b[0]) / (a[1] - b[1]))
        cell["server_ttft_count"] = int(a[1] - b[1])
    b, a = before["forwards"], after["forwards"]
    if b is not None and a is not None:
        cell["forwards"] = {k: int(a[k][0] - b[k][0]) for k in FORWARD_KINDS}
        cell["forward_ms_mean"] = {k: ms((a[k][1] - b[k][1]) / (a[k][0] - b[k][0])) if a[k][0] > b[k][0] else None
                                   for k in FORWARD_KINDS}
        n = sum(cell["forwards"].values())
        hb, ha = before.get("host"), after.get("host")
        if n > 0 and hb is not None and ha is not None:  # the engine thread's host time a forward, by phase
            cell["host_ms_per_forward"] = {p: ms((ha[p] - hb[p]) / n) for p in HOST_PHASES}


def forwards_text(cell):
    """ "decode / mixed / prefill" forwards of the cell, with their mean ms, and the engine's host
    ms a forward before / in / after its launch, for the tables."""
    f, m, h = cell.get("forwards"), cell.get("forward_ms_mean"), cell.get("host_ms_per_forward")
    if not f:
        return "", "", ""
    return ("%d / %d / %d" % tuple(f[k] for k in FORWARD_KINDS),
            " / ".join(fmt(m[k], 2) if m[k] is not None else "-" for k in FORWARD_KINDS),
            " / ".join(fmt(h[p], 3) for p in HOST_PHASES) if h else "")


def auto_procs(n):
    """Worker processes for n clients: one per 50 clients (the self-test's margin), at most a quarter
    of the cores (the server needs the rest), at least one."""
    return max(1, min(math.ceil(n / 50), (os.cpu_count() or 1) // 4))


# ---------------------------------------------------------------------------------------------
# The grid


def run_grid(args, target):
    le = need_locomo_eval()
    result_path = os.path.join(args.out, RESULTS)
    result = None
    if args.resume and os.path.exists(result_path):
        result = json.load(open(result_path))
    convs = le.load_conversations(args.data, args.convs.split(","))
    jobs = make_jobs(convs, args.max_questions)
    models = json.loads(target.get("/v1/models"))
    model = models["data"][0]["id"]
    prompt = le.PROMPTS[args.prompt]
    if result is None:
        result = {"tool": "bench/http_load.py", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                  "command": " ".join(shlex.quote(a) for a in sys.argv), "base_url": args.base_url,
                  "model": model, "tenant": args.tenant, "conversations": [c["sample_id"] for c in convs],
                  "questions": len(jobs), "prompt": prompt, "w": args.w, "host_cpus": os.cpu_count(),
                  "settings": {"duration_s": args.duration, "min_requests": args.min_requests,
                               "max_cell_seconds": args.max_cell_seconds, "requests_per_client": args.requests,
                               "timeout_s": args.timeout},
                  "cells": []}
    if args.do_import:
        result["import"] = import_users(target, args.api_key, args.tenant, convs)
        sys.stderr.write("import: %s\n" % json.dumps(result["import"]))
    grid = [{"mode": m, "k": k, "w": args.w, "tokens": t, "clients": n}
            for t in args.tokens for m in args.modes for k in args.k for n in args.clients]
    done_keys = {cell_key(c) for c in result["cells"]}
    todo = [c for c in grid if cell_key(c) not in done_keys]
    if args.warmup and todo:
        ks = [c["k"] for c in todo if c["mode"] == "inject"]
        if ks:
            result.setdefault("warmups", []).append(warm_up(target, args.api_key, args.tenant, model, jobs, max(ks),
                                                            args.w, prompt, args.warmup_concurrency))
            sys.stderr.write("warm-up: %s\n" % json.dumps(result["warmups"][-1]))
    if args.background_wait and todo:  # the cells then measure serving, not the drain's tail
        result.setdefault("background_waits", []).append(background_wait(target))
        sys.stderr.write("background drain: %s\n" % json.dumps(result["background_waits"][-1]))
    write_outputs(result, args.out)
    fallbacks0 = read_metric(target, "inferscale_memory_inject_fallbacks_total")
    procs = args.procs or auto_procs(max(args.clients))
    pool = Pool(procs, target.worker_target())
    offset = result.get("next_job", 0)
    try:
        for ci, cell in enumerate(todo):
            if args.max_seconds and time.time() - STARTED > args.max_seconds:
                sys.stderr.write("http_load: --max-seconds reached; %d cells left (rerun with the same --out to "
                                 "resume)\n" % (len(todo) - ci))
                break
            spec = {"cell": cell, "n": cell["clients"], "jobs": jobs, "offset": offset, "model": model,
                    "prompt": prompt, "timeout": args.timeout, "requests": args.requests}
            server0 = server_snapshot(target)
            recs, cpu, cut, t0, t_stop, capped = pool.run_cell(spec, args.duration, args.min_requests,
                                                               args.max_cell_seconds)
            server1 = server_snapshot(target)
            offset = (offset + len(recs) + cut) % len(jobs)  # the next cell asks other questions first
            s = summarize_cell(cell, recs, cpu, cut, t0, t_stop, capped, args.requests is not None)
            s["procs"] = min(procs, cell["clients"])
            add_server_side(s, recs, server0, server1)
            result["cells"].append(s)
            result["next_job"] = offset
            write_outputs(result, args.out)
            sys.stderr.write("[%d/%d] %-6s k=%-3d tokens=%-4d clients=%-4d  %6d req  %8.2f req/s  TTFT p50 %s p99 %s ms"
                             "  (mean %s, in the server %s)  ITL p50 %s ms  errors %d  fallbacks %d  encoded %d"
                             "  forwards d/m/p %s (ms %s, host ms %s)\n" % (
                                 ci + 1, len(todo), cell["mode"], cell["k"], cell["tokens"], cell["clients"],
                                 s["requests"], s["req_per_s"], fmt(s["ttft_ms"]["p50"]), fmt(s["ttft_ms"]["p99"]),
                                 fmt(s["ttft_all_ms_mean"], 2), fmt(s.get("server_ttft_ms_mean"), 2),
                                 fmt(s["itl_ms"]["p50"], 2), s["errors"], s["fallbacks"], s["facts_encoded"],
                                 *forwards_text(s)))
            time.sleep(args.pause)  # cut requests leave the server before the next cell
    finally:
        pool.close()
    fallbacks1 = read_metric(target, "inferscale_memory_inject_fallbacks_total")
    if fallbacks0 is not None and fallbacks1 is not None:
        result["server_inject_fallbacks_during_grid"] = fallbacks1 - fallbacks0
    write_outputs(result, args.out)
    return result


# ---------------------------------------------------------------------------------------------
# Self-test: the client against a trivial SSE server (no model), to measure the client's overhead


def sse_chunk(data):
    """One SSE event as one HTTP chunk."""
    d = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(d), d)


SELFTEST_ROLE = (b'{"object":"chat.completion.chunk","model":"selftest","choices":[{"index":0,"delta":{"role":'
                 b'"assistant","content":""},"finish_reason":null}],"usage":null,"memory":{"mode":"inject",'
                 b'"facts":[],"injected_tokens":0,"encoded":0,"loaded":0},"_sent":%.9f}')
SELFTEST_TOKEN = (b'{"object":"chat.completion.chunk","model":"selftest","choices":[{"index":0,"delta":{"content":'
                  b'" tok"},"finish_reason":null}],"usage":null,"_sent":%.9f}')
SELFTEST_FINISH = sse_chunk(b'{"object":"chat.completion.chunk","model":"selftest","choices":[{"index":0,"delta":{},'
                            b'"finish_reason":"length"}],"usage":null}')


def selftest_end(tokens):
    usage = b'{"object":"chat.completion.chunk","model":"selftest","choices":[],"usage":{"prompt_tokens":10,' \
            b'"completion_tokens":%d,"total_tokens":%d}}' % (tokens, tokens + 10)
    return SELFTEST_FINISH + sse_chunk(usage) + sse_chunk(b"[DONE]") + b"0\r\n\r\n"


async def trivial_server_main(sock, ttft_s, itl_s):
    """A server with no model that streams like a batched decode: every step (itl_s apart; back to
    back when 0) writes one token to every running stream, stamped with its send time. The bytes
    are prebuilt, so it costs far less per chunk than the client it measures."""
    running = {}  # writer -> [tokens left, tokens asked, done future]
    wake = asyncio.Event()

    async def steps():
        while True:
            if not running:
                wake.clear()
                await wake.wait()
            t = now()
            event = sse_chunk(SELFTEST_TOKEN % t)
            for w, st in list(running.items()):
                if w.is_closing():
                    continue  # its handler ends it
                w.write(event)
                st[0] -= 1
                if st[0] == 0:
                    w.write(selftest_end(st[1]))
                    del running[w]
                    st[2].set_result(None)
            await asyncio.sleep(max(0.0, itl_s - (now() - t)))

    async def handle(reader, writer):
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                n = 0
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    if h.lower().startswith(b"content-length:"):
                        n = int(h.split(b":", 1)[1])
                body = json.loads(await reader.readexactly(n)) if n else {}
                tokens = max(1, int(body.get("max_tokens", 16)))
                if ttft_s:
                    await asyncio.sleep(ttft_s)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
                             b"\r\n\r\n" + sse_chunk(SELFTEST_ROLE % now()))
                done = asyncio.get_event_loop().create_future()
                running[writer] = [tokens, tokens, done]
                wake.set()
                await done
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            running.pop(writer, None)
            writer.transport.abort()

    stepper = asyncio.ensure_future(steps())
    server = await asyncio.start_server(handle, sock=sock)
    async with server:
        await server.serve_forever()
    stepper.cancel()


def trivial_server_process(sock, ttft_s, itl_s, pipe):
    def report(*_):
        ru = resource.getrusage(resource.RUSAGE_SELF)
        pipe.send(ru.ru_utime + ru.ru_stime)
        os._exit(0)

    signal.signal(signal.SIGTERM, report)
    asyncio.run(trivial_server_main(sock, ttft_s, itl_s))


def self_test(args):
    """Runs the grid's client counts against the trivial server, paced like a GPU decode
    (--selftest-itl-ms between tokens) and flat out (no pacing), and reports what the client adds."""
    ctx = multiprocessing.get_context("fork")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    target = Target("http://127.0.0.1:%d" % port, None, "selftest")
    jobs = [("selftest", "question %d" % i) for i in range(100)]
    rows = []
    for itl_ms in sorted({args.selftest_itl_ms, 0.0}, reverse=True):
        servers = []
        for _ in range(args.selftest_server_procs):
            a, b = ctx.Pipe()
            p = ctx.Process(target=trivial_server_process, args=(sock, args.selftest_ttft_ms / 1000.0,
                                                                  itl_ms / 1000.0, b), daemon=True)
            p.start()
            servers.append((p, a))
        for n in args.clients:
            procs = args.procs or auto_procs(n)
            pool = Pool(procs, target.worker_target())
            for tok in args.tokens:
                cell = {"mode": "inject", "k": 0, "w": 0, "tokens": tok, "clients": n}
                spec = {"cell": cell, "n": n, "jobs": jobs, "offset": 0, "model": "selftest", "prompt": "{}",
                        "timeout": args.timeout, "requests": None}
                recs, cpu, cut, t0, t_stop, capped = pool.run_cell(spec, args.duration, 0, args.max_cell_seconds)
                s = summarize_cell(cell, recs, cpu, cut, t0, t_stop, capped, False)
                # A request waits for the next step for its first token, then one step a token.
                ideal = n / (args.selftest_ttft_ms / 1000.0 + (tok + 0.5) * itl_ms / 1000.0) if itl_ms else None
                row = {"server_itl_ms": itl_ms, "server_ttft_ms": args.selftest_ttft_ms, "clients": n, "tokens": tok,
                       "procs": procs, "requests": s["requests"], "errors": s["errors"], "error_kinds": s["error_kinds"],
                       "req_per_s": s["req_per_s"], "ideal_req_per_s": round(ideal, 1) if ideal else None,
                       "chunks_per_s": round(s["req_per_s"] * (tok + 0), 1), "ttft_ms": s["ttft_ms"],
                       "itl_ms": s["itl_ms"], "client_lag_ms": s.get("client_lag_ms"),
                       "client_cpu_s": s["client_cpu_s"], "window_s": s["window_s"],
                       "client_cpu_us_per_chunk": s["client_cpu_us_per_chunk"],
                       "client_cpu_share": round(s["client_cpu_s"] / max(1e-9, t_stop - t0) / procs, 3)}
                rows.append(row)
                sys.stderr.write("self-test: server ITL %4.1f ms  clients %3d x %d procs  tokens %3d: %8.1f req/s "
                                 "(ideal %s)  %7.0f chunks/s  lag p50 %s p99 %s ms  client CPU %.1f us/chunk, "
                                 "%.0f%% of its cores  errors %d\n" % (
                                     itl_ms, n, procs, tok, row["req_per_s"], row["ideal_req_per_s"],
                                     row["chunks_per_s"], fmt((row["client_lag_ms"] or {}).get("p50"), 2),
                                     fmt((row["client_lag_ms"] or {}).get("p99"), 2),
                                     row["client_cpu_us_per_chunk"] or 0, 100 * row["client_cpu_share"], row["errors"]))
                time.sleep(0.2)
            pool.close()
        cpu = 0.0
        for p, a in servers:
            p.terminate()
            if a.poll(5):
                cpu += a.recv()
            p.join(5)
        rows.append({"server_itl_ms": itl_ms, "server_cpu_s": round(cpu, 2)})
    sock.close()
    cells = [r for r in rows if "clients" in r]
    per_chunk = [r["client_cpu_us_per_chunk"] for r in cells if r["client_cpu_us_per_chunk"]]
    summary = {"host_cpus": os.cpu_count(), "python": sys.version.split()[0], "rows": rows,
               "client_cpu_us_per_chunk_max": max(per_chunk) if per_chunk else None,
               "chunks_per_s_per_core": round(1e6 / max(per_chunk)) if per_chunk else None}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "selftest.json"), "w") as f:
            json.dump(summary, f, indent=1)
    lines = ["| server ITL ms | clients | procs | tokens | req/s | ideal req/s | chunks/s | TTFT p50 | TTFT p99 | "
             "lag p50 | lag p99 | client CPU us/chunk | errors |", "|" + "---|" * 13]
    for r in cells:
        lag = r["client_lag_ms"] or {}
        lines.append("| %s |" % " | ".join(str(x) for x in [
            fmt(r["server_itl_ms"]), r["clients"], r["procs"], r["tokens"], fmt(r["req_per_s"]),
            fmt(r["ideal_req_per_s"]), fmt(r["chunks_per_s"], 0), fmt(r["ttft_ms"]["p50"], 2),
            fmt(r["ttft_ms"]["p99"], 2), fmt(lag.get("p50"), 2), fmt(lag.get("p99"), 2),
            fmt(r["client_cpu_us_per_chunk"]), r["errors"]]))
    print("\n".join(lines))
    print("\nclient CPU per streamed chunk at most %s us: one worker process drives about %s chunks/s at 100%% of a "
          "core; lag = the client's delay between the server writing a chunk and the client taking it" % (
              fmt(summary["client_cpu_us_per_chunk_max"]), summary["chunks_per_s_per_core"]))
    return 1 if any(r["errors"] for r in cells) else 0


# ---------------------------------------------------------------------------------------------


def int_list(s):
    return [int(x) for x in s.split(",") if x.strip()]


# ---------------------------------------------------------------------------------------------
# The cold burst (issue 9, part 1): users just written, then a burst of inject requests at once


def background_wait(target, limit_s=3600):
    """Waits until the server's background encoding has drained (/metrics'
    inferscale_memory_background_queued back at 0); returns how long it took and what it encoded."""
    t0 = time.time()
    queued0 = read_metric(target, "inferscale_memory_background_queued")
    while (read_metric(target, "inferscale_memory_background_queued") or 0) > 0 and time.time() - t0 < limit_s:
        time.sleep(0.2)
    return {"waited": True, "queued_at_start": queued0, "seconds": round(time.time() - t0, 2),
            "encoded": read_metric(target, "inferscale_memory_background_encoded_total")}


def report(out, out_dir, name):
    """Prints a one-shot measurement's result and writes it as out_dir/name (when out_dir is set)."""
    print(json.dumps(out, indent=1))
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(out, f, indent=1)
    return out


def cold_burst(args, target):
    """Imports the users, optionally waits for the server's background encoding to drain
    (--background-wait: /metrics' inferscale_memory_background_queued back at 0), then starts
    --burst-running plain streaming chats (no memory, long answers) and, once they stream, fires
    --cold-burst inject requests at once, one question each. Reports the burst's TTFT and the facts
    each request encoded on demand, and the running chats' inter-token gaps while it lasts (how
    long their decode steps were held up)."""
    le = need_locomo_eval()
    convs = le.load_conversations(args.data, args.convs.split(","))
    jobs = make_jobs(convs, args.max_questions)
    model = json.loads(target.get("/v1/models"))["data"][0]["id"]
    imp = import_users(target, args.api_key, args.tenant, convs)
    bg = background_wait(target) if args.background_wait else {"waited": False}
    k, w, n, tokens = args.k[0], args.w, args.cold_burst, args.tokens[0]
    cell = {"mode": "inject", "k": k, "w": w, "tokens": tokens}
    plain = {"mode": "off", "k": 0, "w": w, "tokens": args.burst_running_tokens}
    head = request_head(target.root, target.host, target.port, target.headers)

    async def burst():
        running_conns = [HttpConn(target.host, target.port) for _ in range(args.burst_running)]
        running = [asyncio.ensure_future(stream_chat(c, head, request_body(model, jobs[i % len(jobs)][0], "Tell me a story.",
                                                                           plain, "{}"), plain["tokens"]))
                   for i, c in enumerate(running_conns)]
        await asyncio.sleep(args.burst_delay)  # the running chats are decoding now
        conns = [HttpConn(target.host, target.port) for _ in range(n)]
        t0 = now()
        recs = await asyncio.gather(*[stream_chat(c, head, request_body(model, jobs[i % len(jobs)][0], jobs[i % len(jobs)][1],
                                                                        cell, args.prompt), tokens)
                                      for i, c in enumerate(conns)])
        t1 = now()
        runs = await asyncio.gather(*running)
        for c in conns + running_conns:
            c.close()
        return recs, runs, t0, t1

    recs, runs, t0, t1 = asyncio.get_event_loop().run_until_complete(burst())
    ttft = [r["first"] - r["start"] for r in recs if r["first"] is not None and not r["error"]]
    gaps = [g for r in runs for g in r["gaps"]]
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "model": model, "import": imp,
           "background": bg, "burst": {"requests": n, "k": k, "w": w, "tokens": tokens,
                                       "errors": sum(1 for r in recs if r["error"]),
                                       "error_examples": [r["error"] for r in recs if r["error"]][:5],
                                       "seconds": round(t1 - t0, 2), "ttft_ms_p50": ms(pct(ttft, 50)),
                                       "ttft_ms_p99": ms(pct(ttft, 99)), "ttft_ms_max": ms(max(ttft) if ttft else None),
                                       "facts_encoded": sum((r.get("memory") or {}).get("encoded") or 0 for r in recs),
                                       "facts_loaded": sum((r.get("memory") or {}).get("loaded") or 0 for r in recs)},
           "running": {"chats": len(runs), "errors": sum(1 for r in runs if r["error"]),
                       "itl_ms_p50": ms(pct(gaps, 50)), "itl_ms_p99": ms(pct(gaps, 99)),
                       "itl_ms_max": ms(max(gaps) if gaps else None)}}
    return report(out, args.out, "cold_burst.json")


def drain_probe(args, target):
    """Imports the users and, while the server encodes their facts in the background, sends one
    plain streamed chat (no memory, --tokens tokens) every --probe-interval seconds until the drain
    has ended and --probe-after seconds more: the TTFT of a request arriving during the background
    encoding (it waits for the background step in progress) and its inter-token gaps (its decode
    steps carry background work beside them) against once it is over, and how long the drain took."""
    convs = need_locomo_eval().load_conversations(args.data, args.convs.split(","))
    model = json.loads(target.get("/v1/models"))["data"][0]["id"]
    imp = import_users(target, args.api_key, args.tenant, convs)
    plain = {"mode": "off", "k": 0, "w": args.w, "tokens": args.tokens[0]}
    head = request_head(target.root, target.host, target.port, target.headers)
    body = request_body(model, convs[0]["sample_id"], "Say hello.", plain, "{}")

    async def probe():
        conn = HttpConn(target.host, target.port)
        during, after, errors = [], [], []
        t0 = now()
        drained, seen = None, False
        while drained is None or now() - drained < args.probe_after:
            queued = read_metric(target, "inferscale_memory_background_queued") or 0
            seen = seen or queued > 0
            if drained is None and queued == 0 and (seen or now() - t0 > 2):  # the writes' queue, once seen
                drained = now()
            r = await stream_chat(conn, head, body, plain["tokens"])
            if r["error"]:
                errors.append(r["error"])
            else:
                (during if drained is None else after).append(r)
            await asyncio.sleep(args.probe_interval)
            if now() - t0 > args.probe_limit:
                break
        conn.close()
        return during, after, errors, (drained - t0) if drained is not None else None

    during, after, errors, drain_s = asyncio.get_event_loop().run_until_complete(probe())
    def stat(recs):
        ttft = [r["first"] - r["start"] for r in recs]
        gaps = [g for r in recs for g in r["gaps"]]
        return {"requests": len(recs), "ttft_ms_p50": ms(pct(ttft, 50)), "ttft_ms_p99": ms(pct(ttft, 99)),
                "ttft_ms_max": ms(max(ttft) if ttft else None), "ttft_ms_mean": ms(sum(ttft) / len(ttft) if ttft else None),
                "itl_ms_p50": ms(pct(gaps, 50)), "itl_ms_p99": ms(pct(gaps, 99))}
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "model": model, "import": imp,
           "drain_seconds": round(drain_s, 2) if drain_s is not None else None,
           "background_encoded": read_metric(target, "inferscale_memory_background_encoded_total"),
           "during_drain": stat(during), "after_drain": stat(after), "errors": len(errors), "error_examples": errors[:5]}
    return report(out, args.out, "drain_probe.json")


def main():
    doc = __doc__
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0], epilog=doc[doc.index("CPU (the demo"):],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server (a trailing /v1 is fine)")
    ap.add_argument("--api-key", default=os.environ.get("INFERSCALE_API_KEY"),
                    help="sent as 'Authorization: Bearer KEY' (default: $INFERSCALE_API_KEY)")
    ap.add_argument("--tenant", default=locomo_eval.TENANT if locomo_eval else "locomo-eval",
                    help="the X-InferScale-Tenant header of every request (default: locomo_eval's)")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                                   "data", "locomo", "locomo10.json"), help="LoCoMo's locomo10.json")
    ap.add_argument("--convs", default="all", help="comma-separated sample_ids, or 'all' (10 users)")
    ap.add_argument("--max-questions", type=int, default=0,
                    help="questions per conversation (0: every non-adversarial one)")
    ap.add_argument("--prompt", default="memory", help="locomo_eval's question prompt preset")
    ap.add_argument("--clients", type=int_list, default=None,
                    help="N: concurrent streaming clients (default 1,10,50,100,200; self-test 1,50,200)")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["inject", "text"])
    ap.add_argument("--k", type=int_list, default=[5, 10, 20, 50], help="facts per request")
    ap.add_argument("--tokens", type=int_list, default=None,
                    help="output tokens per request, ignore_eos (default 32,128; self-test 32)")
    ap.add_argument("--w", type=int, default=2, help="memory.w: turns each fact is encoded after")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds measured per cell, after the first requests (default 8; self-test 5)")
    ap.add_argument("--min-requests", type=int, default=50, help="completions measured per cell at least")
    ap.add_argument("--max-cell-seconds", type=float, default=90.0, help="a cell ends after this, measured or not")
    ap.add_argument("--requests", type=int, default=None,
                    help="instead of --duration: each client sends this many requests after its first")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a request may take (then: an error)")
    ap.add_argument("--procs", type=int, default=0, help="client worker processes (0: one per 50 clients, at most "
                                                           "a quarter of the cores)")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between cells")
    ap.add_argument("--warmup-concurrency", type=int, default=8)
    ap.add_argument("--no-warmup", dest="warmup", action="store_false")
    ap.add_argument("--no-import", dest="do_import", action="store_false")
    ap.add_argument("--no-resume", dest="resume", action="store_false",
                    help="start over even if DIR/results.json has cells")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="start no cell after this many seconds from the start (0: no limit)")
    ap.add_argument("--serve", default=None, help="start this server command first ({port}: the --base-url port) "
                                                  "and stop it at the end; its log goes to DIR/serve.log")
    ap.add_argument("--serve-timeout", type=float, default=900, help="seconds the started server has to answer /health")
    ap.add_argument("--out", default=None, help="the output folder (results.json, results.md, PNGs)")
    ap.add_argument("--plot-only", default=None, metavar="DIR", help="redraw DIR's table and plots from results.json")
    ap.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                    help="merge the cells of these folders' results.json into --out (tables and plots)")
    ap.add_argument("--cold-burst", type=int, default=0, metavar="N",
                    help="instead of the grid: import, then N inject requests at once (first k of --k, first of --tokens)")
    ap.add_argument("--background-wait", action="store_true",
                    help="wait for the server's background encoding to drain: before the cold burst, or after the "
                         "grid's warm-up (so its cells measure serving, not the drain)")
    ap.add_argument("--burst-running", type=int, default=4, help="--cold-burst: plain chats decoding during the burst")
    ap.add_argument("--burst-running-tokens", type=int, default=256, help="--cold-burst: their answer length")
    ap.add_argument("--burst-delay", type=float, default=1.0, help="--cold-burst: seconds between them and the burst")
    ap.add_argument("--drain-probe", action="store_true",
                    help="import the users, then one plain chat every --probe-interval s while the background "
                         "encoding drains and --probe-after s more: TTFT during the drain against after it")
    ap.add_argument("--probe-interval", type=float, default=0.25, help="--drain-probe: seconds between requests")
    ap.add_argument("--probe-after", type=float, default=5.0, help="--drain-probe: seconds probed after the drain")
    ap.add_argument("--probe-limit", type=float, default=900.0, help="--drain-probe: seconds probed at most")
    ap.add_argument("--self-test", action="store_true",
                    help="measure the client against a trivial server (no model); with --out, DIR/selftest.json")
    ap.add_argument("--selftest-itl-ms", type=float, default=20.0, help="self-test server: ms between tokens")
    ap.add_argument("--selftest-ttft-ms", type=float, default=0.0, help="self-test server: ms before the first chunk")
    ap.add_argument("--selftest-server-procs", type=int, default=1)
    args = ap.parse_args()

    if args.plot_only:
        publish(json.load(open(os.path.join(args.plot_only, RESULTS))), args.plot_only)
        return 0
    if args.merge:
        if not args.out:
            sys.exit("http_load: --merge needs --out")
        parts = [json.load(open(os.path.join(d, RESULTS))) for d in args.merge]
        merged = dict(parts[0], merged_from=[dict((k, p.get(k)) for k in ("date", "command", "model")) for p in parts])
        cells = {}
        for p in parts:
            for c in p["cells"]:
                cells[cell_key(c)] = c
        merged["cells"] = list(cells.values())
        publish(merged, args.out)
        return 0
    if args.self_test:
        args.clients = args.clients or [1, 50, 200]
        args.tokens = args.tokens or [32]
        args.duration = args.duration if args.duration is not None else 5.0
        return self_test(args)
    args.clients = args.clients or [1, 10, 50, 100, 200]
    args.tokens = args.tokens or [32, 128]
    args.duration = args.duration if args.duration is not None else 8.0
    if not args.out:
        sys.exit("http_load: --out DIR is required")
    if any(n < 1 for n in args.clients) or any(t < 1 for t in args.tokens):
        sys.exit("http_load: --clients and --tokens must be positive")
    os.makedirs(args.out, exist_ok=True)
    target = Target(args.base_url, args.api_key, args.tenant)
    server = None

    def terminated(*_):
        # SIGTERM (a timeout of the run's time limit): the server we started goes first, so that
        # threads waiting on its answers (the warm-up's) fail at once and the exit is not held up.
        stop_server(server)
        sys.exit("http_load: terminated")

    signal.signal(signal.SIGTERM, terminated)
    if args.serve:
        server = start_server(args.serve, target, os.path.join(args.out, "serve.log"), args.serve_timeout)
    try:
        if args.cold_burst > 0:
            r = cold_burst(args, target)
            return 1 if r["burst"]["errors"] else 0
        if args.drain_probe:
            return 1 if drain_probe(args, target)["errors"] else 0
        result = run_grid(args, target)
    finally:
        stop_server(server)
    publish(result, args.out)
    return 1 if any(c["errors"] for c in result["cells"]) else 0


if __name__ == "__main__":
    sys.exit(main())
