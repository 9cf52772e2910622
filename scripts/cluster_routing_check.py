#!/usr/bin/env python3
"""Checks HAProxy's routing of a running cluster (scripts/cluster.sh up N): python3, stdlib only.

  (a) every user-scoped route (generations with memory.user / memory.user_id, the memory REST
      API's /v1/memory/users/{user}/..., Mem0's self-hosted and platform routes with user_id in the
      body, its filters or the query) sends one (credential, tenant, user) to one replica, the same
      for every route; the API key in its three forms (Authorization: Bearer / Token, X-API-Key)
      routes alike; different users spread over more than one replica;
  (b) unscoped requests (GET /v1/models) reach every replica;
  (c) after kill -9 of one replica, its users are served by another within 5 s, with no failed
      request, and the users of the live replicas keep theirs (consistent hashing);
  (d) an SSE stream arrives through HAProxy as it does from the replica (no buffering); run
      before (c).

The replica that answered is HAProxy's response header X-InferScale-Replica (deploy/haproxy); the
replica rK is the process of CLUSTER_DIR/replica-K.pid, which (c) kills: it stays down until
`scripts/cluster.sh down`. Prints a table per part and exits 1 when a check fails.

  python3 scripts/cluster_routing_check.py [--url http://127.0.0.1:8000] [--cluster-dir cluster]
"""
import argparse
import http.client
import json
import os
import signal
import sys
import time
import urllib.parse
from collections import Counter, defaultdict

FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
    return ok


class Proxy:
    """HTTP to HAProxy over one kept-alive connection, as a client's connection pool sends it.

    keep_alive=False opens a connection per request instead. Then the next request can reach
    HAProxy before it has released the previous one from its replica's count of requests in
    flight, and bounded-load hashing (hash-balance-factor) may count that replica as full: at a
    load of about one request in flight, its bound is one. part_a measures how often that happens.
    """

    def __init__(self, url, timeout, keep_alive=True):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout, self.keep_alive = u.hostname, u.port or 80, timeout, keep_alive
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """One request: (status, replica, route, body bytes)."""
        h = dict(headers or {})
        data = None
        if body is not None:
            # UTF-8 as it is: HAProxy 2.6's json_query decodes no \uXXXX escape past \u00ff (and
            # \u0080-\u00ff to one byte, not UTF-8), so an escaped non-ASCII user id would not
            # match its form in a path (deploy/haproxy/README.md). main() shows what happens then.
            data = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
            h["Content-Type"] = "application/json"
        while True:
            reused = self.conn is not None
            if not reused:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                payload = r.read()  # a stream is read to its end
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                # A kept-alive connection that HAProxy closed while idle (its keep-alive timeout)
                # is replaced once; a failure on a new connection is a failure.
                if reused:
                    continue
                raise
            if not self.keep_alive or r.getheader("Connection", "").lower() == "close":
                self.close()
            return r.status, r.getheader("X-InferScale-Replica"), r.getheader("X-InferScale-Route"), payload

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def quote(user):
    return urllib.parse.quote(user, safe="")


# Each user-scoped route: (name, method, path, body) for a user. Writes come first, so the reads
# after them find the user's memories on the replica the user is routed to.
def scoped_routes(model):
    msg = [{"role": "user", "content": "I like green tea."}]
    gen = {"model": model, "max_tokens": 1, "temperature": 0}
    return [
        ("POST /v1/memory/users/{u}/facts", lambda u: ("POST", f"/v1/memory/users/{quote(u)}/facts", {"facts": [{"text": f"{u} likes green tea"}]})),
        ("GET /v1/memory/users/{u}/facts", lambda u: ("GET", f"/v1/memory/users/{quote(u)}/facts?limit=5", None)),
        ("POST /v1/memory/users/{u}/search", lambda u: ("POST", f"/v1/memory/users/{quote(u)}/search", {"query": "tea", "k": 3})),
        ("GET /v1/memory/users/{u}", lambda u: ("GET", f"/v1/memory/users/{quote(u)}", None)),
        ("chat memory.user", lambda u: ("POST", "/v1/chat/completions", {**gen, "messages": msg, "memory": {"user": u, "k": 2}})),
        ("chat memory.user_id, stream", lambda u: ("POST", "/v1/chat/completions", {**gen, "stream": True, "messages": msg, "memory": {"user_id": u, "top_k": 2}})),
        ("completions memory.user", lambda u: ("POST", "/v1/completions", {**gen, "prompt": "Tea or coffee?", "memory": {"user": u, "k": 2}})),
        ("POST /memories user_id", lambda u: ("POST", "/memories", {"messages": msg, "user_id": u})),
        ("GET /memories?user_id=", lambda u: ("GET", f"/memories?user_id={quote(u)}", None)),
        ("POST /search user_id", lambda u: ("POST", "/search", {"query": "tea", "user_id": u})),
        ("POST /search filters.user_id", lambda u: ("POST", "/search", {"query": "tea", "filters": {"user_id": u}})),
        ("POST /v1/memories/ user_id", lambda u: ("POST", "/v1/memories/", {"messages": msg, "user_id": u})),
        ("POST /v3/memories/add/ filters", lambda u: ("POST", "/v3/memories/add/", {"messages": msg, "filters": {"user_id": u}})),
        ("POST /v1/memories/search/ user_id", lambda u: ("POST", "/v1/memories/search/", {"query": "tea", "user_id": u})),
        ("POST /v2/memories/search/ filters", lambda u: ("POST", "/v2/memories/search/", {"query": "tea", "filters": {"user_id": u}})),
        ("POST /v3/memories/ filters", lambda u: ("POST", "/v3/memories/", {"filters": {"user_id": u}})),
        ("DELETE /v1/memories/?user_id=", lambda u: ("DELETE", f"/v1/memories/?user_id={quote(u)}", None)),
    ]


# Ways a client names its tenant: none (the default tenant), the tenant header, and one API key in
# each of the three forms the server takes (which must route alike: they are one credential).
VARIANTS = [
    ("no credential", {}),
    ("X-InferScale-Tenant", {"X-InferScale-Tenant": "acme"}),
    ("Bearer key", {"Authorization": "Bearer sk-routing-check-1"}),
    ("Token key", {"Authorization": "Token sk-routing-check-1"}),
    ("X-API-Key key", {"X-API-Key": "sk-routing-check-1"}),
]


def table(title, header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    line = "  ".join("-" * w for w in widths)
    print(line)
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print(line)
    for r in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print(line)


def scoped_request(proxy, model, user, headers):
    """The request of a user's chat with memory: a POST generation, the route a failover tests."""
    body = {"model": model, "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": "hi"}],
            "memory": {"user": user, "k": 1}}
    return proxy.request("POST", "/v1/chat/completions", body, headers)


def part_a(proxy, model, users, repeats):
    routes = scoped_routes(model)
    # (variant, user) -> Counter of replicas, over every route and repeat
    where = defaultdict(Counter)
    rows = []
    for name, make in routes:
        per_user = defaultdict(set)
        statuses = Counter()
        routed = Counter()
        for variant, headers in VARIANTS:
            for user in users:
                for _ in range(repeats):
                    method, path, body = make(user)
                    status, replica, route, _ = proxy.request(method, path, body, headers)
                    statuses[status] += 1
                    routed[route] += 1
                    per_user[(variant, user)].add(replica)
                    where[(variant, user)][replica] += 1
        consistent = sum(1 for s in per_user.values() if len(s) == 1)
        spread = Counter(next(iter(s)) for s in per_user.values() if len(s) == 1)
        ok = (consistent == len(per_user) and set(routed) == {"user"} and len(spread) > 1
              and all(200 <= s < 300 for s in statuses))
        check(ok, f"(a) {name}")
        rows.append((name, sum(statuses.values()), f"{consistent}/{len(per_user)}",
                     " ".join(f"{r}:{c}" for r, c in sorted(spread.items())),
                     " ".join(f"{s}x{c}" for s, c in sorted(statuses.items())),
                     ",".join(sorted(str(r) for r in routed)), "ok" if ok else "FAIL"))
    table("(a) user-scoped routes: one (credential, tenant, user) -> one replica (one kept-alive client connection)",
          ["route", "requests", "keys on 1 replica", "keys per replica", "statuses", "X-InferScale-Route", ""], rows)

    # Informational: the same with a new connection per request (see Proxy).
    fresh = Proxy(f"http://{proxy.host}:{proxy.port}", proxy.timeout, keep_alive=False)
    spilled = 0
    total = 0
    for user in users:
        home = where[(VARIANTS[0][0], user)].most_common(1)[0][0]
        for _ in range(5):
            _, replica, _, _ = scoped_request(fresh, model, user, {})
            total += 1
            spilled += replica != home
    print(f"\n(a) with a new connection per request, {spilled} of {total} chat requests went to another replica than "
          "the user's (bounded load counting the previous request as still in flight; informational)")

    # Across routes: each key's replica is the same for every route.
    across = sum(1 for c in where.values() if len(c) == 1)
    ok_across = check(across == len(where), "(a) one replica per key across all routes")
    # The three forms of one key route alike, for every user.
    key_forms = ["Bearer key", "Token key", "X-API-Key key"]
    same_key = sum(1 for u in users if len({next(iter(where[(v, u)])) for v in key_forms}) == 1)
    ok_forms = check(same_key == len(users), "(a) Bearer, Token and X-API-Key forms of one key route alike")
    # Mem0's agent entity: agent_id in a body and a query, and memory.user "agent:{id}" (the user
    # the server files an agent's memories under) on one replica.
    agent = Counter()
    for _ in range(repeats):
        for method, path, body in [("POST", "/memories", {"messages": [{"role": "user", "content": "hello"}], "agent_id": "helper-bot"}),
                                   ("GET", "/memories?agent_id=helper-bot", None),
                                   ("POST", "/search", {"query": "hello", "filters": {"agent_id": "helper-bot"}}),
                                   ("POST", "/v1/chat/completions", {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
                                                                     "memory": {"user": "agent:helper-bot", "k": 1}})]:
            status, replica, route, _ = proxy.request(method, path, body)
            agent[(replica, route, status)] += 1
    ok_agent = check(len({r for r, _, _ in agent}) == 1 and {rt for _, rt, _ in agent} == {"user"}, "(a) Mem0 agent_id routes as the user agent:{id}")
    spread = Counter(next(iter(c)) for c in where.values() if len(c) == 1)
    ok_spread = check(len(spread) > 1, "(a) users spread over more than one replica")
    table("(a) across routes",
          ["check", "result", ""],
          [("keys on one replica for every route", f"{across}/{len(where)}", "ok" if ok_across else "FAIL"),
           ("users whose Bearer/Token/X-API-Key forms agree", f"{same_key}/{len(users)}", "ok" if ok_forms else "FAIL"),
           ("Mem0 agent_id and memory.user agent:{id}", " ".join(f"{r}/{rt}/{s}x{c}" for (r, rt, s), c in agent.items()), "ok" if ok_agent else "FAIL"),
           ("keys per replica (all routes)", " ".join(f"{r}:{c}" for r, c in sorted(spread.items())), "ok" if ok_spread else "FAIL")])
    return {key: next(iter(c)) for key, c in where.items() if len(c) == 1}


def part_b(proxy, replicas, count):
    seen = Counter()
    routed = Counter()
    statuses = Counter()
    for _ in range(count):
        status, replica, route, _ = proxy.request("GET", "/v1/models")
        seen[replica] += 1
        routed[route] += 1
        statuses[status] += 1
    ok = check(set(seen) == set(replicas) and set(routed) == {"any"} and set(statuses) == {200}, "(b) unscoped requests reach every replica")
    table("(b) unscoped requests: any replica", ["route", "requests", "replicas reached", "statuses", "X-InferScale-Route", ""],
          [("GET /v1/models", count, " ".join(f"{r}:{c}" for r, c in sorted(seen.items())),
            " ".join(f"{s}x{c}" for s, c in statuses.items()), ",".join(routed), "ok" if ok else "FAIL")])


def stream_timing(host, port, body, timeout):
    """Streams one completion: (replica header, seconds to the first event, largest gap between
    two events, events)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        start = time.perf_counter()
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        times = []
        while line := r.readline():
            if line.startswith(b"data:"):
                times.append(time.perf_counter() - start)
        gaps = [b - a for a, b in zip(times, times[1:])]
        return r.getheader("X-InferScale-Replica"), times[0], max(gaps, default=0.0), len(times)
    finally:
        conn.close()


def part_d(proxy, model, mapping, port_base, timeout, runs=3):
    """An SSE stream through HAProxy arrives as the replica sends it. HAProxy holding partial
    packets shows in every run as a first event tens of ms late and bursts with long gaps, so the
    best of `runs` streams through HAProxy must be within 30 ms (first event) and 50 ms (largest
    gap) of the best read from the replica directly; a stall of a busy machine hits one run only."""
    user, home = next((u, r) for (v, u), r in mapping.items() if v == VARIANTS[0][0])
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": True, "stream": True,
            "memory": {"user": user, "mode": "off"}}
    rows = []
    best = {"proxy": (float("inf"), float("inf")), "direct": (float("inf"), float("inf"))}
    routed_home = True
    for _ in range(runs):
        for label, port in (("proxy", proxy.port), ("direct", port_base + int(home[1:]))):
            replica, first, gap, events = stream_timing(proxy.host, port, body, timeout)
            if label == "proxy":
                routed_home &= replica == home
            best[label] = (min(best[label][0], first), min(best[label][1], gap))
            rows.append((label, replica or home, events, f"{first * 1000:.1f}", f"{gap * 1000:.1f}"))
    ok = check(routed_home and best["proxy"][0] <= best["direct"][0] + 0.03 and best["proxy"][1] <= best["direct"][1] + 0.05,
               "(d) SSE streams pass through HAProxy unbuffered")
    rows.append(("best: proxy - direct", "", "", f"{(best['proxy'][0] - best['direct'][0]) * 1000:+.1f}",
                 f"{(best['proxy'][1] - best['direct'][1]) * 1000:+.1f}"))
    table(f"(d) a 300-token SSE stream of {user!r}, through HAProxy and straight from {home}: {'ok' if ok else 'FAIL'}",
          ["path", "replica", "events", "first event ms", "largest gap ms"], rows)


def replica_pid(cluster_dir, name, port_base):
    """The pid of replica rK from CLUSTER_DIR/replica-K.pid, checked to be `inferscale serve` on its port."""
    k = int(name[1:])
    with open(os.path.join(cluster_dir, f"replica-{k}.pid")) as f:
        pid = int(f.read().strip())
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    if b"serve" not in argv or (port_base is not None and str(port_base + k).encode() not in argv):
        raise SystemExit(f"pid {pid} of replica-{k}.pid is not replica {name}'s inferscale serve: {argv}")
    return pid


def wait_until_gone(pid, timeout_s):
    """Waits until process pid has exited: no /proc entry, or a zombie (its files closed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.001)
    raise SystemExit(f"pid {pid} still runs {timeout_s} s after kill -9")


def part_c(proxy, model, mapping, cluster_dir, port_base, deadline_s):
    variant, headers = VARIANTS[1]  # the tenant header: a key as most clients send one
    users_of = defaultdict(list)
    for (v, user), replica in mapping.items():
        if v == variant:
            users_of[replica].append(user)
    victim = max(users_of, key=lambda r: len(users_of[r]))
    pid = replica_pid(cluster_dir, victim, port_base)
    moved_users = users_of[victim]
    kept = {u: r for r, us in users_of.items() if r != victim for u in us}

    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    # kill() returns before the process is gone: until the kernel has closed its listening socket,
    # a connection can still be accepted into its backlog and then reset, which is a request in
    # flight on the dead replica (the failover test allows those; this check counts none). The
    # clock runs from the kill all the same.
    wait_until_gone(pid, timeout_s=2.0)
    served_at = {}
    new_home = {}
    errors = Counter()
    attempts = 0
    # Every user of the dead replica, in turns, until each has an answer from another replica.
    while len(served_at) < len(moved_users) and time.monotonic() - killed_at < deadline_s + 5:
        for user in moved_users:
            if user in served_at:
                continue
            attempts += 1
            try:
                status, replica, _, _ = scoped_request(proxy, model, user, headers)
            except (OSError, http.client.HTTPException) as e:
                errors[type(e).__name__] += 1
                continue
            if status != 200:
                errors[status] += 1
                continue
            if replica != victim:
                served_at[user] = time.monotonic() - killed_at
                new_home[user] = replica
    failover_s = max(served_at.values()) if len(served_at) == len(moved_users) else float("inf")
    ok_failover = check(failover_s <= deadline_s, f"(c) users of the killed replica served by another within {deadline_s} s")
    ok_errors = check(not errors, "(c) no request failed during the failover")

    # After the failover: the moved users stay on their new replica, the others on theirs.
    stayed = sum(1 for u, r in kept.items() if scoped_request(proxy, model, u, headers)[1] == r)
    settled = sum(1 for u, r in new_home.items() if scoped_request(proxy, model, u, headers)[1] == r)
    ok_kept = check(stayed == len(kept), "(c) users of live replicas keep their replica")
    ok_settled = check(settled == len(new_home) == len(moved_users), "(c) moved users stay on their new replica")
    table(f"(c) kill -9 of {victim} (pid {pid}), tenant header acme",
          ["check", "result", ""],
          [(f"{victim}'s {len(moved_users)} users served elsewhere", f"after {failover_s:.3f} s (limit {deadline_s} s), {attempts} requests", "ok" if ok_failover else "FAIL"),
           ("failed requests meanwhile", " ".join(f"{k}x{c}" for k, c in errors.items()) or "none", "ok" if ok_errors else "FAIL"),
           ("new replicas of the moved users", " ".join(f"{r}:{c}" for r, c in sorted(Counter(new_home.values()).items())), ""),
           ("users of live replicas on the same replica", f"{stayed}/{len(kept)}", "ok" if ok_kept else "FAIL"),
           ("moved users on their new replica again", f"{settled}/{len(moved_users)}", "ok" if ok_settled else "FAIL")])
    print(f"\n{victim} stays down (pid {pid} killed); scripts/cluster.sh down stops the rest.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=f"http://127.0.0.1:{os.environ.get('INFERSCALE_PORT', '8000')}", help="HAProxy's address")
    ap.add_argument("--cluster-dir", default=os.environ.get("INFERSCALE_CLUSTER_DIR",
                                                            os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster")))
    ap.add_argument("--users", type=int, default=12, help="users per credential variant")
    ap.add_argument("--repeats", type=int, default=2, help="requests per (route, user, variant)")
    ap.add_argument("--unscoped", type=int, default=30, help="unscoped requests of part (b)")
    ap.add_argument("--failover-limit", type=float, default=5.0, help="seconds within which (c) must move the users")
    ap.add_argument("--no-kill", action="store_true", help="skip part (c), which kills a replica")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    args = ap.parse_args()

    proxy = Proxy(args.url, args.timeout)
    status, _, _, body = proxy.request("GET", "/v1/models")
    if status != 200:
        raise SystemExit(f"GET {args.url}/v1/models answered {status}: is the cluster up?")
    model = json.loads(body)["data"][0]["id"]
    env = {}
    env_file = os.path.join(args.cluster_dir, "cluster.env")
    if os.path.exists(env_file):
        env = dict(line.strip().split("=", 1) for line in open(env_file) if "=" in line)
    n = int(env.get("N", "0"))
    port_base = int(env["PORT"]) if "PORT" in env else None
    replicas = [f"r{i}" for i in range(1, n + 1)]
    if n < 2 or port_base is None:
        raise SystemExit(f"{env_file} names {n} replicas: the check needs a cluster of at least 2 (scripts/cluster.sh up 3)")
    print(f"cluster: {args.url}, {n} replicas, model {model}")

    # Users whose names need care: a space, a slash (a%2Fb in a path), non-ASCII.
    users = [f"user-{i:02d}" for i in range(args.users - 3)] + ["ann lee", "team/a", "zoë"]
    mapping = part_a(proxy, model, users, args.repeats)
    # Informational: non-ASCII user ids \u-escaped in a JSON body (json.dumps' default).
    rows = []
    for user in ["zoë", "中村"]:
        path_home = proxy.request("GET", f"/v1/memory/users/{quote(user)}/facts")[1:3]
        escaped = json.dumps({"query": "tea", "user_id": user}).encode()
        rows.append((user, "/".join(map(str, path_home)), "/".join(map(str, proxy.request("POST", "/search", escaped)[1:3]))))
    table("(a) informational: a non-ASCII user id escaped in a JSON body (\\uXXXX) vs. the same id in a path",
          ["user", "path: replica/route", "escaped body: replica/route"], rows)

    part_b(proxy, replicas, args.unscoped)
    part_d(proxy, model, mapping, port_base, args.timeout)
    if not args.no_kill:
        part_c(proxy, model, mapping, args.cluster_dir, port_base, args.failover_limit)

    print()
    if FAILURES:
        print("FAILED:\n  " + "\n  ".join(FAILURES))
        sys.exit(1)
    print("all routing checks passed")


if __name__ == "__main__":
    main()
