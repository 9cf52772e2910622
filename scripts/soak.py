#!/usr/bin/env python3
"""Soak check: mixed traffic against one `inferscale serve` on loopback for a bounded time.

Starts its own server (demo model, CPU, memory with KV files in a temporary data directory, an
ephemeral port on 127.0.0.1) and runs worker threads that each own a few users, so every answer
is predictable and any unexpected status is an error:

  chat      chats with memory (inject or text, streamed or not, k 1..8) and plain ones
  write     facts and conversation turns, some under an Idempotency-Key that is then retried
  edit      PATCH of a fact's text (re-encodes it and the turns after it)
  delete    one fact, or a whole user that is then written again
  search    the REST search route
  cut       a streamed chat closed after its first event, a request cut mid-headers, an idle
            connection left to the server's keep-alive timeout
  health    GET /health and /metrics

It samples the server's resident memory (VmRSS) and open file descriptors every few seconds and
prints a markdown summary: requests per kind, errors (with the first few), RSS and descriptors
after the warm-up and at the end, and how long SIGTERM took. Exit status 1 on any error or a
server that did not stop cleanly. Only the standard library; nothing leaves 127.0.0.1.

  scripts/soak.py --binary build/inferscale --minutes 10
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

TIMEOUT = 60  # seconds any one request may take


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []

    def ok(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def error(self, kind, what):
        with self.lock:
            self.counts[kind + " (error)"] = self.counts.get(kind + " (error)", 0) + 1
            self.errors.append(f"{kind}: {what}")


def request(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        data = json.dumps(body).encode() if body is not None else None
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        c.close()


def expect(stats, kind, status, body, want=200):
    if status != want:
        stats.error(kind, f"status {status}: {body[:200]!r}")
        return None
    stats.ok(kind)
    return json.loads(body) if body else None


class Worker(threading.Thread):
    """Owns users w<i>-u0.. in tenant t<i % 2>; knows which fact ids each of them has."""

    def __init__(self, index, port, stats, deadline, seed):
        super().__init__(daemon=True)
        self.i, self.port, self.stats, self.deadline = index, port, stats, deadline
        self.rng = random.Random(seed)
        self.tenant = {"X-InferScale-Tenant": f"soak-t{index % 2}"}
        self.users = {f"w{index}-u{j}": [] for j in range(3)}
        self.turn_no = 0

    def call(self, method, path, body=None, extra=None):
        h = dict(self.tenant)
        h.update(extra or {})
        return request(self.port, method, path, body, h)

    def add_facts(self, user, n, key=None):
        facts = [{"text": f"{user} note {self.rng.randrange(10**6)} about {self.rng.choice(WORDS)} and "
                          f"{self.rng.choice(WORDS)}", "speaker": user, "date": "2024-03-02"} for _ in range(n)]
        body = {"facts": facts}
        extra = {"Idempotency-Key": key} if key else None
        st, b, _ = self.call("POST", f"/v1/memory/users/{user}/facts", body, extra)
        got = expect(self.stats, "write", st, b)
        if got is None:
            return
        if key:  # the retry a client makes when it lost the answer: the same ids, nothing written
            st2, b2, h2 = self.call("POST", f"/v1/memory/users/{user}/facts", body, extra)
            if st2 != 200 or b2 != b or h2.get("Idempotent-Replayed") != "true":
                self.stats.error("write", f"idempotent retry: {st2} {b2[:120]!r} vs {b[:120]!r}")
            else:
                self.stats.ok("write (retry)")
        self.users[user].extend(got["ids"])

    def add_turns(self, user):
        turns = []
        for _ in range(self.rng.randint(1, 3)):
            self.turn_no += 1
            turns.append({"text": f"turn {self.turn_no}: {self.rng.choice(WORDS)} {self.rng.choice(WORDS)}",
                          "speaker": self.rng.choice(["A", "B"])})
        st, b, _ = self.call("POST", f"/v1/memory/users/{user}/facts", {"conversation": "c", "turns": turns})
        got = expect(self.stats, "write", st, b)
        if got:
            self.users[user].extend(got["ids"])

    def chat(self, user):
        stream = self.rng.random() < 0.4
        body = {"model": "demo", "max_tokens": self.rng.randint(2, 12), "temperature": 0, "stream": stream,
                "messages": [{"role": "user", "content": f"what about {self.rng.choice(WORDS)}?"}]}
        if self.rng.random() < 0.85:
            body["memory"] = {"user": user, "k": self.rng.randint(1, 8), "w": self.rng.choice([0, 2]),
                              "mode": self.rng.choice(["inject", "inject", "text"])}
        st, b, _ = self.call("POST", "/v1/chat/completions", body)
        if st != 200:
            self.stats.error("chat", f"status {st}: {b[:200]!r}")
        elif stream and not b.rstrip().endswith(b"data: [DONE]"):
            self.stats.error("chat", f"stream without [DONE]: {b[-200:]!r}")
        elif stream and b'"error"' in b:
            self.stats.error("chat", f"stream error event: {b[-300:]!r}")
        else:
            self.stats.ok("chat")

    def chat_shared(self):
        # The churned user's memory (tenant soak-t0): its facts come and go during the request.
        body = {"model": "demo", "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": f"and {self.rng.choice(WORDS)}?"}],
                "memory": {"user": SHARED, "tenant": "soak-t0", "k": 8, "w": 2}}
        st, b, _ = request(self.port, "POST", "/v1/chat/completions", body)
        expect(self.stats, "chat (shared)", st, b)  # a user without facts at this instant is a 200 too

    def cut(self):
        kind = self.rng.choice(["stream", "headers", "idle"])
        s = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
        try:
            if kind == "stream":
                body = json.dumps({"model": "demo", "max_tokens": 200, "stream": True, "ignore_eos": True,
                                   "messages": [{"role": "user", "content": "a long one"}]}).encode()
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                got = b""
                while b"data: " not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                if b"data: " not in got:
                    self.stats.error("cut", f"no first event: {got[:200]!r}")
                    return
            elif kind == "headers":
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Half: ")
                time.sleep(0.05)
            else:
                time.sleep(0.05)  # connect, say nothing, go
            self.stats.ok("cut")
        finally:
            s.close()

    def run(self):
        for user in self.users:
            self.add_facts(user, 4)
            self.add_turns(user)
        while time.time() < self.deadline:
            user = self.rng.choice(list(self.users))
            ids = self.users[user]
            r = self.rng.random()
            try:
                if r < 0.05:
                    self.chat_shared()
                elif r < 0.40:
                    self.chat(user)
                elif r < 0.55 and len(ids) >= MAX_FACTS:  # users stay bounded: the run's data does not grow
                    fid = ids.pop(self.rng.randrange(len(ids)))
                    st, b, _ = self.call("DELETE", f"/v1/memory/users/{user}/facts/{fid}")
                    expect(self.stats, "delete", st, b)
                elif r < 0.55:
                    if self.rng.random() < 0.5:
                        self.add_facts(user, self.rng.randint(1, 3), key=f"w{self.i}-{self.rng.randrange(10**9)}")
                    else:
                        self.add_turns(user)
                elif r < 0.62 and ids:
                    fid = self.rng.choice(ids)
                    st, b, _ = self.call("PATCH", f"/v1/memory/users/{user}/facts/{fid}",
                                         {"text": f"{user} edited {self.rng.choice(WORDS)}"})
                    expect(self.stats, "edit", st, b)
                elif r < 0.70 and ids:
                    if self.rng.random() < 0.1:
                        st, b, _ = self.call("DELETE", f"/v1/memory/users/{user}")
                        if expect(self.stats, "delete", st, b) is not None:
                            self.users[user] = []
                            self.add_facts(user, 3)
                    else:
                        fid = ids.pop(self.rng.randrange(len(ids)))
                        st, b, _ = self.call("DELETE", f"/v1/memory/users/{user}/facts/{fid}")
                        expect(self.stats, "delete", st, b)
                elif r < 0.82 and ids:
                    st, b, _ = self.call("POST", f"/v1/memory/users/{user}/search",
                                         {"query": self.rng.choice(WORDS), "k": 5})
                    got = expect(self.stats, "search", st, b)
                    if got is not None:
                        for hit in got["data"]:
                            if hit["id"] not in ids:
                                self.stats.error("search", f"{user} got a fact that is not theirs: {hit}")
                elif r < 0.90:
                    self.cut()
                else:
                    path = self.rng.choice(["/health", "/metrics"])
                    st, b, _ = request(self.port, "GET", path)
                    if st == 200:
                        self.stats.ok("health")
                    else:
                        self.stats.error("health", f"{path} {st}")
            except (OSError, http.client.HTTPException) as e:
                self.stats.error("transport", repr(e))
            if not self.users[user]:
                self.add_facts(user, 2)


class Churn(threading.Thread):
    """Adds and deletes the facts of one shared user as fast as it can, while the workers chat with
    that user's memory: facts deleted between a chat's retrieval and its composition."""

    def __init__(self, port, stats, deadline):
        super().__init__(daemon=True)
        self.port, self.stats, self.deadline = port, stats, deadline
        self.rng = random.Random(7)
        self.ids = []

    def run(self):
        h = {"X-InferScale-Tenant": "soak-t0"}
        while time.time() < self.deadline:
            try:
                facts = [{"text": f"shared {self.rng.choice(WORDS)} {self.rng.choice(WORDS)}"} for _ in range(3)]
                st, b, _ = request(self.port, "POST", f"/v1/memory/users/{SHARED}/facts", {"facts": facts}, h)
                got = expect(self.stats, "churn", st, b)
                if got:
                    self.ids.extend(got["ids"])
                for _ in range(min(3, len(self.ids))):  # as many as it added: the user stays small
                    fid = self.ids.pop(self.rng.randrange(len(self.ids)))
                    st, b, _ = request(self.port, "DELETE", f"/v1/memory/users/{SHARED}/facts/{fid}", None, h)
                    expect(self.stats, "churn", st, b)
                time.sleep(0.02)
            except (OSError, http.client.HTTPException) as e:
                self.stats.error("transport", repr(e))


SHARED = "shared-user"
MAX_FACTS = 40  # per worker user

WORDS = ["cat", "dog", "kite", "bicycle", "garden", "Lisbon", "Oslo", "cello", "marathon", "bread", "rain",
         "train", "museum", "coffee", "chess", "river", "snow", "piano", "book", "lamp"]


def proc_stats(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "inferscale"))
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds before the first RSS/fd sample counts")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--keep", action="store_true", help="keep the data directory and the server log")
    a = ap.parse_args()

    data = tempfile.mkdtemp(prefix="inferscale-soak-")
    log = open(os.path.join(data, "serve.log"), "w+")
    cmd = [a.binary, "serve", "--model", "demo", "--host", "127.0.0.1", "--port", "0", "--data-dir",
           os.path.join(data, "mem"), "--kv-files", "--threads", "1", "--max-pending", "64", "--memory-k", "8",
           "--window", "2", "--keep-alive-timeout", "2", "--read-timeout", "5"]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    port = None
    for _ in range(600):
        log.seek(0)
        m = re.search(r"serving '[^']*' at http://127\.0\.0\.1:(\d+)/v1", log.read())
        if m:
            port = int(m.group(1))
            break
        if server.poll() is not None:
            break
        time.sleep(0.1)
    if port is None:
        log.seek(0)
        print("the server did not start:\n" + log.read())
        server.kill()
        return 1

    stats = Stats()
    start = time.time()
    deadline = start + a.minutes * 60
    workers = [Worker(i, port, stats, deadline, a.seed * 100 + i) for i in range(a.workers)]
    workers.append(Churn(port, stats, deadline))
    for w in workers:
        w.start()
    samples = []  # (seconds since start, rss KiB, fds)
    while any(w.is_alive() for w in workers):
        time.sleep(5)
        if server.poll() is not None:
            stats.error("server", f"exited with {server.returncode} during the run")
            break
        samples.append((time.time() - start, *proc_stats(server.pid)))
    for w in workers:
        w.join(TIMEOUT)
    t0 = time.time()
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        code = "killed after 30 s"
    stop_s = time.time() - t0

    warm = [s for s in samples if s[0] >= a.warmup] or samples
    first, mid, last = warm[0], warm[len(warm) // 2], warm[-1]
    total = sum(v for k, v in stats.counts.items() if "(error)" not in k)
    print(f"\n## Soak: {a.minutes:g} min, {a.workers} workers, port {port}, data {data}\n")
    print("| requests | count |\n|---|---|")
    for k in sorted(stats.counts):
        print(f"| {k} | {stats.counts[k]} |")
    print(f"| all | {total} ({total / (a.minutes * 60):.1f}/s) |")
    print(f"\nerrors: {len(stats.errors)}")
    for e in stats.errors[:10]:
        print(f"  - {e}")
    print("\n| | at {:.0f} s | at {:.0f} s | at {:.0f} s (end) | growth | max |\n|---|---|---|---|---|---|".format(
        first[0], mid[0], last[0]))
    print(f"| RSS (MiB) | {first[1] / 1024:.1f} | {mid[1] / 1024:.1f} | {last[1] / 1024:.1f} | "
          f"{(last[1] - first[1]) / 1024:+.1f} | {max(s[1] for s in samples) / 1024:.1f} |")
    print(f"| open fds | {first[2]} | {mid[2]} | {last[2]} | {last[2] - first[2]:+d} | {max(s[2] for s in samples)} |")
    print(f"\nSIGTERM -> exit {code} in {stop_s:.2f} s")
    if a.keep:
        print(f"data and log kept in {data}")
    else:
        shutil.rmtree(data, ignore_errors=True)
    return 0 if not stats.errors and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
