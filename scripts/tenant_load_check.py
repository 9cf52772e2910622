#!/usr/bin/env python3
"""Tenant isolation under load: concurrent streaming chats with memory across tenants with keys.

Starts its own `inferscale serve` on 127.0.0.1 (an ephemeral port, a temporary data directory,
an --api-keys file with one key per tenant, one of them given as its sha256 line), then:

  seed   every tenant gets the SAME user names, each user a few facts that name their tenant and
         user (so fact ids, which count per tenant, collide across tenants on purpose)
  load   N streaming chat requests at once (a barrier starts them together), spread over the
         tenants and users, memory inject or text, each with its tenant's key

and checks each answer: status 200, an SSE stream ending in [DONE] without an error event, and a
memory report in the first chunk whose facts all belong to the request's tenant and user (by text
and by id). Prints a markdown summary; exit status 1 on any error or cross-tenant fact. Only the
standard library; nothing leaves 127.0.0.1. It is not a throughput benchmark: it only checks
isolation under concurrency.

  scripts/tenant_load_check.py --binary build/inferscale [--model demo] [--requests 64] [--tenants 4]
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time

TIMEOUT = 300  # seconds one request may take


def call(port, method, path, key, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        h = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def start_server(args, tmp, keys_file):
    cmd = [args.binary, "serve", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
           "--data-dir", os.path.join(tmp, "data"), "--api-keys", keys_file,
           "--max-pending", str(max(256, 2 * args.requests)), "--memory-k", "4", "--window", "1"]
    err = open(os.path.join(tmp, "serve.err"), "w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 300
    while time.time() < deadline:
        err.seek(0)
        m = re.search(r"serving '[^']*' at http://127\.0\.0\.1:(\d+)/v1", err.read())
        if m:
            return proc, int(m.group(1)), err
        if proc.poll() is not None:
            err.seek(0)
            raise SystemExit(f"the server exited ({proc.returncode}): {err.read()[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start within 300 s")


def stream_chat(port, key, model, user, mode, max_tokens, question):
    """One streaming chat; returns (error or None, memory report facts, seconds)."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": question}],
            "memory": {"user": user, "k": 4, "mode": mode}}
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        r = c.getresponse()
        raw = r.read().decode("utf-8", "replace")
        if r.status != 200:
            return f"status {r.status}: {raw[:200]}", [], time.time() - t0
    except Exception as e:  # a reset, a timeout: an error of this request
        return f"{type(e).__name__}: {e}", [], time.time() - t0
    finally:
        c.close()
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "the stream did not end with [DONE]", [], time.time() - t0
    chunks = [json.loads(e) for e in events[:-1]]
    if any("error" in ch for ch in chunks):
        return f"error event: {[ch for ch in chunks if 'error' in ch][0]}", [], time.time() - t0
    if "memory" not in chunks[0]:
        return "no memory report in the first chunk", [], time.time() - t0
    return None, chunks[0]["memory"]["facts"], time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/inferscale")
    ap.add_argument("--model", default="demo")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--users", type=int, default=4, help="users per tenant (the same names in every tenant)")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="tenant-load-")
    tenants = [f"tenant{i}" for i in range(args.tenants)]
    keys = {t: "sk-" + secrets.token_hex(16) for t in tenants}
    keys_file = os.path.join(tmp, "keys.txt")
    with open(keys_file, "w") as f:
        f.write("# one key per tenant; the first as its sha256 line\n")
        for i, t in enumerate(tenants):
            k = "sha256:" + hashlib.sha256(keys[t].encode()).hexdigest() if i == 0 else keys[t]
            f.write(f"{k} {t}\n")
    proc, port, err = start_server(args, tmp, keys_file)
    try:
        st, b = call(port, "GET", "/v1/models", keys[tenants[0]])
        assert st == 200, b
        model = json.loads(b)["data"][0]["id"]
        # A key of no tenant is refused before the load starts (the check must be able to fail).
        st, _ = call(port, "GET", "/v1/models", "sk-not-a-key")
        assert st == 401, st

        # Seed: the same user names in every tenant, facts naming tenant and user; ids collide.
        owned = {}  # (tenant, user) -> {id: text}
        for t in tenants:
            for u in range(args.users):
                user = f"u{u}"
                texts = [f"{t} {user} keeps a {thing} in the garden shed" for thing in
                         ("red bicycle", "blue kayak", "green ladder", "yellow kite")]
                st, b = call(port, "POST", f"/v1/memory/users/{user}/facts", keys[t],
                             {"facts": [{"text": x, "speaker": user} for x in texts]})
                assert st == 200, b
                owned[(t, user)] = dict(zip(json.loads(b)["ids"], texts))

        # Load: all requests at once, spread over tenants, users and modes.
        results = [None] * args.requests
        barrier = threading.Barrier(args.requests)

        def worker(i):
            t = tenants[i % len(tenants)]
            user = f"u{(i // len(tenants)) % args.users}"
            mode = "inject" if i % 2 == 0 else "text"
            barrier.wait()
            results[i] = (t, user, mode) + stream_chat(port, keys[t], model, user, mode, args.max_tokens,
                                                       "What does the garden shed hold?")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.requests)]
        t0 = time.time()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.time() - t0

        errors, cross, checked = [], [], 0
        for t, user, mode, error, facts, _ in results:
            if error:
                errors.append(f"{t}/{user}/{mode}: {error}")
                continue
            mine = owned[(t, user)]
            for f in facts:
                checked += 1
                if mine.get(f["id"]) != f["text"] or not f["text"].startswith(f"{t} {user} "):
                    cross.append(f"{t}/{user}: got fact {f['id']} {f['text']!r}")
        latencies = sorted(r[-1] for r in results)
        served_facts = sum(len(r[4]) for r in results if not r[3])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        err.close()

    print(f"### Tenant isolation under load ({args.model}, {args.requests} concurrent streaming chats, "
          f"{args.tenants} tenants with keys)\n")
    print("| requests | tenants x users | errors | facts in memory reports | cross-tenant facts | wall s | p50 s | max s |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {args.requests} | {args.tenants} x {args.users} | {len(errors)} | {served_facts} | {len(cross)} | "
          f"{wall:.1f} | {statistics.median(latencies):.2f} | {latencies[-1]:.2f} |")
    for e in (errors + cross)[:10]:
        print(f"\n- {e}")
    if checked == 0:
        print("\nno fact was checked: the check proved nothing")
    shutil.rmtree(tmp, ignore_errors=True)
    raise SystemExit(1 if errors or cross or checked == 0 else 0)


if __name__ == "__main__":
    main()
