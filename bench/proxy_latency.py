#!/usr/bin/env python3
"""The latency HAProxy adds in front of a replica (scripts/cluster.sh up N): python3, stdlib only.

Sends the same small requests N times straight to one replica and through HAProxy, from one
client, interleaved (direct then proxy, then proxy then direct, ...), each over its own kept-alive
connection (or a new connection per request with --new-connection), and prints p50/p90/p99 of
each and the difference of the p50s:

  - GET /health: the proxy's own cost on a request the replica answers at once;
  - POST /v1/completions, max_tokens 1, not streamed: a generation, with memory.user set (mode
    off: nothing retrieved) so that HAProxy reads the body and hashes the user as it does for
    user-scoped traffic; the direct requests go to the replica HAProxy picks for that user, so
    both paths run on the same replica;
  - the same streamed with max_tokens 16, timed to its first token's event (TTFT): what a proxy
    holding back partial packets would delay.

  python3 bench/proxy_latency.py [--proxy http://127.0.0.1:8000] [-n 500] [--new-connection]
"""
import argparse
import http.client
import json
import os
import time
import urllib.parse
from collections import Counter


class Client:
    def __init__(self, url, new_connection, timeout=60):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.new_connection, self.timeout = u.hostname, u.port, new_connection, timeout
        self.conn = None

    def send(self, method, path, body=None):
        """(seconds from send to the whole answer read, or to the first token of a stream (a body
        with "stream": true), status, X-InferScale-Replica)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else {}
        start = time.perf_counter()
        if self.conn is None or self.new_connection:
            # A new connection's setup is part of its request's time.
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        if body is not None and body.get("stream"):
            elapsed = None
            # The events, to the end of the body; timed: the first with text (the first token;
            # a request with `memory` starts with an event holding only the memory report).
            while line := r.readline():
                if elapsed is None and line.startswith(b"data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    if choices[0].get("text"):
                        elapsed = time.perf_counter() - start
        else:
            r.read()
            elapsed = time.perf_counter() - start
        if self.new_connection or r.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = None
        return elapsed, r.status, r.getheader("X-InferScale-Replica")


def percentile(sorted_values, q):
    """The q-quantile (0..1) by linear interpolation between the closest ranks."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxy", default=f"http://127.0.0.1:{os.environ.get('INFERSCALE_PORT', '8000')}", help="HAProxy")
    ap.add_argument("--direct", help="the replica to compare with (default: the one HAProxy routes the bench user to, "
                                     "found from X-InferScale-Replica rK and the cluster's ports: proxy port + K)")
    ap.add_argument("-n", type=int, default=500, help="requests of each kind on each path")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--new-connection", action="store_true", help="a new TCP connection per request on both paths")
    args = ap.parse_args()

    proxy = Client(args.proxy, args.new_connection)
    _, status, _ = proxy.send("GET", "/health")
    if status != 200:
        raise SystemExit(f"{args.proxy}/health answered {status}")
    conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=10)
    conn.request("GET", "/v1/models")
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    conn.close()
    completion = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0,
                  "memory": {"user": "latency-bench", "mode": "off"}}
    _, status, replica = proxy.send("POST", "/v1/completions", completion)
    if status != 200:
        raise SystemExit(f"POST /v1/completions through {args.proxy} answered {status}")
    direct_url = args.direct or f"http://{proxy.host}:{proxy.port + int(replica[1:])}"
    direct = Client(direct_url, args.new_connection)

    stream = {**completion, "max_tokens": 16, "stream": True}
    kinds = [("GET /health", "GET", "/health", None),
             ("POST /v1/completions max_tokens 1", "POST", "/v1/completions", completion),
             ("stream, 16 tokens: first token", "POST", "/v1/completions", stream)]
    times = {(k, p): [] for k, *_ in kinds for p in ("direct", "proxy")}
    replicas = Counter()
    errors = Counter()
    for i in range(args.warmup + args.n):
        for name, method, path, body in kinds:
            order = [("direct", direct), ("proxy", proxy)]
            if i % 2:
                order.reverse()
            for label, client in order:
                elapsed, status, rep = client.send(method, path, body)
                if status != 200:
                    errors[(name, label, status)] += 1
                if i >= args.warmup:
                    times[(name, label)].append(elapsed * 1000)
                    if label == "proxy" and body is not None:
                        replicas[rep] += 1

    print(f"proxy {args.proxy}, direct {direct_url} (replica {replica}), model {model}, n = {args.n} each, "
          f"{'a new connection per request' if args.new_connection else 'kept-alive connections'}")
    print(f"{'request':36} {'path':7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, *_ in kinds:
        p50 = {}
        for label in ("direct", "proxy"):
            v = sorted(times[(name, label)])
            p50[label] = percentile(v, 0.5)
            print(f"{name:36} {label:7} {p50[label]:8.3f} {percentile(v, 0.9):8.3f} {percentile(v, 0.99):8.3f} {sum(v) / len(v):8.3f}")
        print(f"{name:36} {'p50 difference (proxy - direct)':>44}: {p50['proxy'] - p50['direct']:+.3f} ms")
    print(f"proxied completions answered by: {dict(replicas)}")
    if errors:
        print(f"non-200 answers: {dict(errors)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
