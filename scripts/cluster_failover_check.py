#!/usr/bin/env python3
"""Failure tests of a cluster on this machine's loopback (python3, stdlib only): PostgreSQL,
HAProxy and 3 replicas on the built-in demo model, behind API keys of two tenants, started with
scripts/cluster.sh in a folder of its own on free ports and stopped at the end.

  A. kill -9 of one replica while 16 clients stream chats with memory and 4 writers add and
     edit facts (each write under an Idempotency-Key, retried with it until answered):
       - every write acknowledged before the kill is in the store afterwards, and each add
         exactly once;
       - the requests that failed are at most those in flight on the dead replica at the kill
         (answered by it, or sent and not yet answered by any);
       - the dead replica's users are served by the others within 5 s (--deadline-scale x).
  B. PostgreSQL restarted (down 2 s) under the same load:
       - writes during the outage get 503 with Retry-After, never a hang (every request ends
         within its timeout) nor a crash (every replica still answers /health);
       - chats without memory are served throughout;
       - everything works again within 5 s of its return (--deadline-scale x).
  C. a write through replica A is found by a search through replica B within 1 s (each pair).
  D. with API keys, nothing through the proxy reads, searches, injects or gets a prefix-cache hit
     from the other tenant's memory.
  E. a turn edited through one replica is served at its new version by another, which encodes
     again the turns whose window held it (and only those).

Prints each part's figures and exits 1 when a check fails (77: a prerequisite is missing).

  python3 scripts/cluster_failover_check.py --binary build/inferscale [--replicas 3]
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from free_ports import free_base  # noqa: E402
FAILURES = []
KEYS = {"acme": "key-acme-0123", "globex": "key-globex-4567"}


# The recovery deadline after a replica's kill or PostgreSQL's return: an answer complete within it
# (main() scales it with --deadline-scale).
RECOVERY_S = 5.0

def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


class Cluster:
    def __init__(self, binary, replicas):
        self.n = replicas
        self.dir = tempfile.mkdtemp(prefix="inferscale-cluster-")
        os.chmod(self.dir, 0o755)  # PostgreSQL runs as the user postgres under root
        base = free_base(replicas + 2)
        self.port, self.pg_port = base, base + replicas + 1
        keys = os.path.join(self.dir, "keys.txt")
        with open(keys, "w") as f:
            for tenant, key in KEYS.items():
                f.write(f"{key} {tenant}\n")
        self.env = dict(os.environ, INFERSCALE_BIN=binary, INFERSCALE_CLUSTER_DIR=self.dir,
                        INFERSCALE_PORT=str(self.port), INFERSCALE_PG_PORT=str(self.pg_port))
        self.env.pop("INFERSCALE_STORE", None)
        self.serve_args = ["--model", "demo", "--api-keys", keys, "--memory-k", "4", "--window", "1"]

    def script(self, *args, check=True):
        return subprocess.run([os.path.join(ROOT, "scripts", "cluster.sh"), *args], env=self.env, check=check,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def up(self):
        r = self.script("up", str(self.n), *self.serve_args, check=False)
        print(r.stdout, end="")
        if r.returncode != 0:
            raise RuntimeError("cluster.sh up failed")

    def down(self):
        r = self.script("down", check=False)
        print(r.stdout, end="")
        shutil.rmtree(self.dir, ignore_errors=True)

    def replica_port(self, i):
        return self.port + i

    def replica_pid(self, i):
        with open(os.path.join(self.dir, f"replica-{i}.pid")) as f:
            return int(f.read().strip())

    def postgres(self, cmd):
        subprocess.run([os.path.join(ROOT, "scripts", "private_postgres.sh"), cmd, os.path.join(self.dir, "postgres")],
                       check=True, stdout=subprocess.DEVNULL)


def headers(tenant, extra=None):
    h = {"Authorization": f"Bearer {KEYS[tenant]}", "Content-Type": "application/json"}
    h.update(extra or {})
    return h


def call(port, method, path, body=None, tenant="acme", extra=None, timeout=15):
    """(status, headers dict, body text); status 0 when the connection failed."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers(tenant, extra))
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, {}, str(e)
    finally:
        c.close()


# ---- the load: streaming chats and writers ----------------------------------------------------

class Load:
    """16 streaming chat clients with memory and 4 writers, through HAProxy, until stop()."""

    def __init__(self, cluster, users, label, chats=16, writers=4):
        self.c, self.users, self.label = cluster, users, label
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.in_flight = {}  # request id -> replica name or None (sent, no answer yet)
        self.events = []     # (t_start, t_end, kind, user, ok, status, replica, retry_after)
        self.acked = {}      # text -> (user, id): adds answered 200
        self.edits = {}      # (user, id) -> text last acknowledged by an edit
        self.threads = [threading.Thread(target=self.chat_loop, args=(i,), daemon=True) for i in range(chats)]
        self.threads += [threading.Thread(target=self.write_loop, args=(i,), daemon=True) for i in range(writers)]

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=60)
        return not any(t.is_alive() for t in self.threads)

    def record(self, *event):
        with self.lock:
            self.events.append(event)

    def chat_once(self, user, memory=True):
        rid = uuid.uuid4().hex
        body = {"model": "demo", "messages": [{"role": "user", "content": f"What do you know about {user}?"}],
                "max_tokens": 8, "temperature": 0, "stream": True}
        if memory:
            body["memory"] = {"user": user, "mode": "inject"}
        t0 = time.time()
        with self.lock:
            self.in_flight[rid] = None
        status, replica, ok, retry = 0, None, False, None
        conn = http.client.HTTPConnection("127.0.0.1", self.c.port, timeout=15)
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers("acme"))
            r = conn.getresponse()
            status, replica, retry = r.status, r.getheader("X-InferScale-Replica"), r.getheader("Retry-After")
            with self.lock:
                self.in_flight[rid] = replica
            text = r.read().decode("utf-8", "replace")
            ok = status == 200 and text.rstrip().endswith("data: [DONE]") and '"error"' not in text
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            conn.close()
            with self.lock:
                self.in_flight.pop(rid, None)
        self.record(t0, time.time(), "chat" if memory else "plain", user, ok, status, replica, retry)
        return ok

    def chat_loop(self, i):
        rng = random.Random(i)
        while not self.stop_flag.is_set():
            self.chat_once(rng.choice(self.users), memory=(i != 0))  # client 0: chats without memory

    def write(self, path, method, body, user):
        """One write under a fresh Idempotency-Key, retried with the same key until answered (or
        the load stops): (status of the answer, body)."""
        key = uuid.uuid4().hex
        while True:
            t0 = time.time()
            status, h, text = call(self.c.port, method, path, body, extra={"Idempotency-Key": key}, timeout=15)
            self.record(t0, time.time(), "write", user, status == 200, status, h.get("x-inferscale-replica"),
                        h.get("retry-after"))
            if status == 200 or self.stop_flag.is_set():
                return status, text
            time.sleep(0.1)

    def write_loop(self, w):
        rng = random.Random(100 + w)
        n = 0
        while not self.stop_flag.is_set():
            user = rng.choice(self.users)
            n += 1
            text = f"{self.label} writer {w} note {n}: {user} likes item {rng.randint(0, 10**6)}"
            status, body = self.write(f"/v1/memory/users/{user}/facts", "POST", {"facts": [{"text": text}]}, user)
            if status != 200:
                continue
            fid = json.loads(body)["ids"][0]
            with self.lock:
                self.acked[text] = (user, fid)
            if n % 3 == 0:  # edit the fact just written
                new = text + " (edited)"
                status, _ = self.write(f"/v1/memory/users/{user}/facts/{fid}", "PATCH", {"text": new}, user)
                if status == 200:
                    with self.lock:
                        self.edits[(user, fid)] = new

    def snapshot_in_flight(self):
        with self.lock:
            return list(self.in_flight.values())


def all_facts(port, user):
    out, after = [], 0
    while True:
        status, _, text = call(port, "GET", f"/v1/memory/users/{user}/facts?after={after}&limit=1000")
        if status != 200:
            raise RuntimeError(f"listing {user}: {status} {text[:200]}")
        page = json.loads(text)
        out += page["data"]
        if not page["has_more"]:
            return out
        after = page["next_after"]


def check_writes(cluster, load, users):
    """Every acknowledged add is stored once (by text), with its last acknowledged edit."""
    facts = {}
    for u in users:
        for f in all_facts(cluster.port, u):
            facts.setdefault(f["text"], []).append((u, f["id"]))
    missing = dup = stale = 0
    for text, (user, fid) in load.acked.items():
        edited = load.edits.get((user, fid))
        found = facts.get(edited or text, []) + ([] if edited else facts.get(text + " (edited)", []))
        if not found:
            missing += 1
        if len(facts.get(text, [])) + len(facts.get(text + " (edited)", [])) > 1:
            dup += 1
        if edited and not facts.get(edited):
            stale += 1
    check(missing == 0, f"acknowledged adds in the store afterwards: {len(load.acked) - missing}/{len(load.acked)}")
    check(dup == 0, f"acknowledged adds stored more than once: {dup}")
    check(stale == 0, f"acknowledged edits in the store: {len(load.edits) - stale}/{len(load.edits)}")


def seed(cluster, users):
    for u in users:
        for tenant in KEYS:
            status, _, text = call(cluster.port, "POST", f"/v1/memory/users/{u}/facts",
                                   {"facts": [{"text": f"{u} of {tenant} keeps the secret word {tenant}-{u}-word"}]},
                                   tenant=tenant)
            if status != 200:
                raise RuntimeError(f"seeding {u}: {status} {text[:200]}")


# ---- the parts ----------------------------------------------------------------------------------

def part_a(cluster, users):
    print("\nA. kill -9 of a replica under load (16 streaming chat clients with memory, 4 writers)")
    load = Load(cluster, users, "A")
    load.start()
    time.sleep(4)
    # The victim: the replica that answered most chats so far.
    counts = {}
    for e in list(load.events):
        if e[2] == "chat" and e[6]:
            counts[e[6]] = counts.get(e[6], 0) + 1
    victim = max(counts, key=counts.get)
    moved = sorted({e[3] for e in list(load.events) if e[2] == "chat" and e[6] == victim})
    flight = load.snapshot_in_flight()
    t_kill = time.time()
    os.kill(cluster.replica_pid(int(victim[1:])), signal.SIGKILL)
    on_victim, unanswered = sum(1 for r in flight if r == victim), sum(1 for r in flight if r is None)
    # The replica is gone once its port refuses connections: until then HAProxy may still hand it
    # requests (the kernel accepts them for a process that is dying), and they fail with it.
    t_gone = time.time()
    while time.time() - t_kill < 5:
        try:
            socket.create_connection(("127.0.0.1", cluster.replica_port(int(victim[1:]))), timeout=0.1).close()
        except OSError:
            t_gone = time.time()
            break
        time.sleep(0.001)
    # Each of the victim's users asks at once, again and again, until another replica serves it.
    probes = [threading.Thread(target=lambda u=u: [None for _ in iter(lambda: load.chat_once(u) or
                                                                        time.time() - t_kill > 10, True)], daemon=True)
              for u in moved]
    for t in probes:
        t.start()
    for t in probes:
        t.join(timeout=15)
    time.sleep(max(0.0, 6 - (time.time() - t_kill)))
    ended = load.stop()
    check(ended, "every client's requests ended (no hang)")
    after = [e for e in load.events if e[1] >= t_kill]
    failed = [e for e in load.events if not e[4] and e[2] != "write"]
    failed_writes = [e for e in load.events if not e[4] and e[2] == "write"]
    # In flight on the dead replica: answered by it, or sent before it was gone and not answered.
    dying = [e for e in load.events if e[0] < t_gone and e[1] >= t_kill and e[6] in (victim, None)]
    print(f"  killed {victim}: {on_victim} requests in flight on it and {unanswered} sent and unanswered at the "
          f"kill, its port closed {1000 * (t_gone - t_kill):.0f} ms later, {len(dying)} requests in flight on it "
          f"until then; {len(load.events)} requests, {len(load.acked)} adds and {len(load.edits)} edits acknowledged")
    for e in failed:
        print(f"    failed: {e[2]} of {e[3]} sent {e[0] - t_kill:+.3f} s, ended {e[1] - t_kill:+.3f} s after the kill: "
              f"status {e[5]}, replica {e[6]}")
    check(all(e in dying for e in failed),
          f"failed chats: {len(failed)}, all of them in flight on {victim} (sent before its port closed, "
          f"answered by it or by no one)")
    print(f"  writes answered with an error and retried under their key: {len(failed_writes)}")
    # Recovery: for each of the victim's users, the first chat after the kill served by another replica.
    worst = worst_sent = 0.0
    served = 0
    for u in moved:
        oks = [e for e in after if e[3] == u and e[4] and e[6] not in (None, victim) and e[2] == "chat"]
        if oks:
            served += 1
            first = min(oks, key=lambda e: e[1])
            worst = max(worst, first[1] - t_kill)
            worst_sent = max(worst_sent, first[0] - t_kill)
    check(served == len(moved) and worst <= RECOVERY_S,
          f"{victim}'s {len(moved)} users served by the others: {served}, the last answer complete {worst:.2f} s after "
          f"the kill (limit {RECOVERY_S:g} s; that request was sent {worst_sent:+.2f} s after it)")
    check_writes(cluster, load, users)
    return victim


def part_b(cluster, users, dead):
    print("\nB. PostgreSQL restarted (down 2 s) under the same load")
    load = Load(cluster, users, "B")
    load.start()
    time.sleep(2)
    t_down = time.time()
    cluster.postgres("stop")
    time.sleep(2)
    cluster.postgres("start")
    t_up = time.time()
    time.sleep(7)
    ended = load.stop()
    check(ended, "every client's requests ended (no hang)")
    outage = [e for e in load.events if t_down <= e[0] and e[1] <= t_up]
    bad = [e for e in load.events if not e[4]]
    not_503 = [e for e in bad if e[2] == "write" and not (e[5] == 503 and e[7])]
    writes_503 = [e for e in bad if e[2] == "write" and e[5] == 503 and e[7]]
    print(f"  outage {t_up - t_down:.1f} s: {len(load.events)} requests, {len(outage)} within it; "
          f"{len(writes_503)} writes answered 503 with Retry-After")
    check(len(writes_503) > 0, "writes during the outage were refused with 503 + Retry-After")
    check(not not_503, f"failed writes that were not 503 with Retry-After: {len(not_503)} "
                       f"{[(e[5], e[7]) for e in not_503[:5]]}")
    slowest = max((e[1] - e[0] for e in load.events), default=0)
    check(slowest < 15, f"slowest request {slowest:.2f} s (none hung)")
    plain_bad = [e for e in load.events if e[2] == "plain" and not e[4]]
    plain = [e for e in outage if e[2] == "plain" and e[4]]
    check(not plain_bad and plain, f"chats without memory during the outage: {len(plain)} served, {len(plain_bad)} failed")
    for i in range(1, cluster.n + 1):
        if f"r{i}" == dead:
            continue
        status, _, _ = call(cluster.replica_port(i), "GET", "/health")
        check(status == 200, f"r{i} alive after the restart")
    # Recovery: the first successful write and memory chat through each live replica after the return.
    for kind in ("write", "chat"):
        per = {}
        for e in load.events:
            if e[2] == kind and e[4] and e[0] >= t_up and e[6]:
                per[e[6]] = min(per.get(e[6], 1e9), e[1] - t_up)
        live = {f"r{i}" for i in range(1, cluster.n + 1)} - {dead}
        worst = max(per.values()) if per else 1e9
        check(set(per) >= live and worst <= RECOVERY_S,
              f"{kind}s served again by {sorted(per)} within {worst:.2f} s of the return (limit {RECOVERY_S:g} s)")
    check_writes(cluster, load, users)


def part_c(cluster, dead):
    print("\nC. a write through one replica, found by a search through another")
    live = [i for i in range(1, cluster.n + 1) if f"r{i}" != dead]
    worst = 0.0
    for a in live:
        for b in live:
            if a == b:
                continue
            word = f"zebra{uuid.uuid4().hex[:8]}"
            status, _, text = call(cluster.replica_port(a), "POST", "/v1/memory/users/cross/facts",
                                   {"facts": [{"text": f"cross likes the {word}"}]})
            if not check(status == 200, f"write through r{a}"):
                continue
            t0 = time.time()
            found = False
            while time.time() - t0 < 3:
                status, _, text = call(cluster.replica_port(b), "POST", "/v1/memory/users/cross/search",
                                       {"query": word, "k": 3})
                if status == 200 and word in text:
                    found = True
                    break
                time.sleep(0.005)
            took = time.time() - t0
            worst = max(worst, took)
            check(found and took <= 1.0, f"r{a} -> r{b}: found after {took * 1000:.0f} ms (limit 1 s)")
    print(f"  slowest {worst * 1000:.0f} ms")


def part_d(cluster, users):
    print("\nD. tenants through the proxy, with API keys")
    leaks = []
    for u in users:
        other = "globex-" + u + "-word"
        for path, method, body in [
            (f"/v1/memory/users/{u}/facts", "GET", None),
            (f"/v1/memory/users/{u}/search", "POST", {"query": "secret word", "k": 10}),
            ("/v1/chat/completions", "POST", {"model": "demo", "max_tokens": 4, "temperature": 0,
                                              "messages": [{"role": "user", "content": "secret word?"}],
                                              "memory": {"user": u, "mode": "inject", "k": 10}}),
            (f"/memories?user_id={u}", "GET", None),
            ("/search", "POST", {"query": "secret word", "user_id": u}),
        ]:
            status, _, text = call(cluster.port, method, path, body, tenant="acme")
            if status != 200 or other in text or f"acme-{u}-word" not in text:
                leaks.append((path, status, text[:120]))
        # A tenant header naming the other tenant is refused for this key.
        status, _, _ = call(cluster.port, "GET", f"/v1/memory/users/{u}/facts", tenant="acme",
                            extra={"X-InferScale-Tenant": "globex"})
        if status != 403:
            leaks.append(("tenant header", status, ""))
    check(not leaks, f"acme's requests saw only acme's memory on {len(users)} users x 5 routes: "
                     f"{len(leaks)} problems {leaks[:3]}")
    # The prefix cache: the same prompt with memory, from both tenants, on the same user name: the
    # second tenant, which never chatted before, gets no cached token (the cache is per tenant).
    u = users[0]
    body = {"model": "demo", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": "secret word?"}], "memory": {"user": u, "mode": "text", "k": 10}}
    _, _, a = call(cluster.port, "POST", "/v1/chat/completions", body, tenant="acme")
    _, _, g = call(cluster.port, "POST", "/v1/chat/completions", body, tenant="globex")
    ja, jg = json.loads(a), json.loads(g)
    cached = (jg.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    facts_a = [f["text"] for f in ja["memory"]["facts"]] if "memory" in ja else []
    facts_g = [f["text"] for f in jg["memory"]["facts"]] if "memory" in jg else []
    check(all("globex" not in t for t in facts_a) and all("acme" not in t for t in facts_g) and facts_g,
          f"each tenant's chat got its own facts ({len(facts_a)} and {len(facts_g)})")
    check(cached == 0, f"globex's first chat reused {cached} cached tokens of {jg['usage']['prompt_tokens']}")


def part_e(cluster):
    print("\nE. a turn edited through one replica, re-encoded with its window on another")
    a, b = cluster.replica_port(1), cluster.replica_port(2)
    user = f"turns{uuid.uuid4().hex[:6]}"
    turns = [{"text": f"zebra note {w}", "speaker": "Ann"} for w in ("one", "two", "three", "four", "five")]
    status, _, text = call(a, "POST", f"/v1/memory/users/{user}/facts", {"conversation": "c", "turns": turns})
    if not check(status == 200, f"five turns written through r1: {status}"):
        return
    ids = json.loads(text)["ids"]
    body = {"model": "demo", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": "zebra?"}],
            "memory": {"user": user, "mode": "inject", "k": 5, "w": 2, "query": "zebra note"}}

    def chat():
        status, _, text = call(b, "POST", "/v1/chat/completions", body)
        m = json.loads(text).get("memory", {}) if status == 200 else {}
        return status, m.get("encoded", -1), sorted(f["text"] for f in m.get("facts", []))

    first, again = chat(), chat()
    check(first[0] == 200 and first[1] == 5 and again[1] == 0,
          f"r2 encodes the 5 turns once: {first[1]}, then {again[1]}")
    status, _, _ = call(a, "PATCH", f"/v1/memory/users/{user}/facts/{ids[1]}", {"text": "zebra note TWO edited"})
    check(status == 200, "turn 2 edited through r1")
    t0 = time.time()
    while True:
        status, encoded, texts = chat()
        if "zebra note TWO edited" in texts or time.time() - t0 > 1.0:
            break
        time.sleep(0.01)
    # The edited turn, and the two turns whose window (w = 2) held it: turns 3 and 4.
    check("zebra note TWO edited" in texts and "zebra note two" not in texts and encoded == 3,
          f"r2 serves the edit {1000 * (time.time() - t0):.0f} ms later, encoding {encoded} turns (expected 3)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "inferscale"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--users", type=int, default=24)
    ap.add_argument("--deadline-scale", type=float, default=1.0,
                    help="multiplies the 5 s recovery deadlines (sanitizer builds: their replicas answer 2-3x slower, "
                         "and a recovery is timed to an answer's end)")
    args = ap.parse_args()
    global RECOVERY_S
    RECOVERY_S = 5.0 * args.deadline_scale
    if not shutil.which("haproxy"):
        print("skipped: haproxy is not installed (scripts/setup.sh installs it)")
        return 77
    if subprocess.run([os.path.join(ROOT, "scripts", "private_postgres.sh"), "url", tempfile.gettempdir()],
                      stdout=subprocess.DEVNULL).returncode == 77:
        print("skipped: no PostgreSQL server binaries (scripts/setup.sh installs postgresql-15)")
        return 77
    cluster = Cluster(args.binary, args.replicas)
    users = [f"user{i:02d}" for i in range(args.users)]
    try:
        cluster.up()
        seed(cluster, users)
        part_d(cluster, users)
        part_c(cluster, None)
        part_e(cluster)
        dead = part_a(cluster, users)
        part_b(cluster, users, dead)
        part_c(cluster, dead)
    finally:
        cluster.down()
    print("\n" + ("all failure checks passed" if not FAILURES else f"{len(FAILURES)} checks failed:"))
    for f in FAILURES:
        print("  " + f)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
