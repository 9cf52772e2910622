#!/usr/bin/env python3
"""Personal-facts recall and answer accuracy of InferScale's memory modes, over HTTP.

What it measures, on bench/data/personal_facts.json (six users, 10-12 simple personal facts each,
two paraphrased questions per fact and the key value a correct answer must contain):

1. Retrieval recall@k: each question is sent to the user's memory search route
   (`POST /v1/memory/users/{user}/search`, the server's retriever, `k` = --k); a hit is the
   question's own fact among the k results. Also the mean reciprocal rank of that fact.
2. Answer accuracy per memory mode (`off`, `text`, `inject`) and sampling (`greedy`: temperature 0;
   `default`: the server's own sampling defaults, no temperature / top_p / top_k sent, with a fixed
   seed per question and run so that a rerun draws the same tokens; --seeds N repeats it with N
   seeds and reports the mean). Each question is asked alone as the user's message of
   `POST /v1/chat/completions` with `"memory": {"user", "k", "mode"}`; an answer is correct when it
   contains any of the fact's key strings (case-insensitive, whitespace collapsed). The response's
   `memory` report says which facts were placed in the prompt; "fact in context" is the share of
   answers whose prompt held the question's own fact.

Before asking, every chosen user is forgotten (`DELETE /v1/memory/users/{user}`) and the user's
facts are written again in the file's order, either as free-standing facts (--write facts) or as
the turns of one conversation, spoken by the user (--write turns; each turn is then encoded after
the turns before it, the server's --window). Every request carries `X-InferScale-Tenant` (--tenant,
default personal-facts-eval), so the run touches no other tenant's memory; with --api-key the key
decides the tenant, so pass the key's tenant as --tenant (or --tenant '' to send no header).

Run it against a server with memory (a data directory), e.g.

    build/inferscale serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --data-dir /tmp/pf-data --port 8000
    python3 bench/personal_facts_eval.py --base-url http://127.0.0.1:8000 --write facts --out results/personal-facts

Quick smoke: add `--limit-questions 10 --samplings greedy`. `--score-only DIR` recomputes
DIR/summary.json and DIR/summary.md from DIR/predictions.jsonl and DIR/retrieval.jsonl.

Writes to --out DIR: predictions.jsonl (one line per question x mode x sampling x seed: the
answer, whether it is correct, the facts the server placed and the ids the search returned),
retrieval.jsonl (one line per question), run.json (the run's settings), summary.json and
summary.md (accuracy per mode x sampling, recall@k, a per-topic breakdown). Only Python's
standard library is needed.
"""
import argparse
import collections
import hashlib
import http.client
import json
import math
import os
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

PROG = "personal_facts_eval"
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "personal_facts.json")
MODES = ("off", "text", "inject")
SAMPLINGS = ("greedy", "default")
CONVERSATION = "personal-facts"


class EvalError(Exception):
    """An error to report in one line and stop on (no traceback)."""


def fail(msg, code=2):
    sys.stderr.write("\n%s: error: %s\n" % (PROG, msg))
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# Data


def load_data(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise EvalError("cannot read the data set %s: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise EvalError("%s is not valid JSON: %s" % (path, e))
    users = data.get("users") if isinstance(data, dict) else None
    if not isinstance(users, list) or not users:
        raise EvalError("%s: expected an object with a non-empty \"users\" list" % path)
    seen = set()
    for ui, u in enumerate(users):
        where = "%s: users[%d]" % (path, ui)
        if not isinstance(u, dict) or not isinstance(u.get("id"), str) or not isinstance(u.get("name"), str):
            raise EvalError("%s: needs string \"id\" and \"name\"" % where)
        if u["id"] in seen:
            raise EvalError("%s: user id %r given twice" % (where, u["id"]))
        seen.add(u["id"])
        facts = u.get("facts")
        if not isinstance(facts, list) or not facts:
            raise EvalError("%s (%s): needs a non-empty \"facts\" list" % (where, u["id"]))
        for fi, f in enumerate(facts):
            fw = "%s.facts[%d]" % (where, fi)
            if not isinstance(f, dict) or not isinstance(f.get("text"), str) or not f["text"].strip():
                raise EvalError("%s: needs a non-empty string \"text\"" % fw)
            key = f.get("key")
            if isinstance(key, str):
                f["key"] = key = [key]
            if not isinstance(key, list) or not key or not all(isinstance(k, str) and k.strip() for k in key):
                raise EvalError("%s: \"key\" must be a non-empty list of strings" % fw)
            qs = f.get("questions")
            if not isinstance(qs, list) or not qs or not all(isinstance(q, str) and q.strip() for q in qs):
                raise EvalError("%s: \"questions\" must be a non-empty list of strings" % fw)
    return data


def select_users(data, names):
    users = data["users"]
    if not names:
        return users
    by_id = {u["id"]: u for u in users}
    missing = [n for n in names if n not in by_id]
    if missing:
        raise EvalError("no user named %s in the data set (it has: %s)" % (
            ", ".join(missing), ", ".join(u["id"] for u in users)))
    return [by_id[n] for n in names]


def questions_of(users, limit):
    """(user, fact index, question index, question) in the file's order; the first `limit` if set."""
    out = []
    for u in users:
        for fi, f in enumerate(u["facts"]):
            for qi, q in enumerate(f["questions"]):
                out.append((u, fi, qi, q))
    return out[:limit] if limit else out


def norm(s):
    return " ".join(str(s).split()).casefold()


def is_correct(answer, keys):
    a = norm(answer)
    return any(norm(k) in a for k in keys)


def seed_of(user, question, run):
    """A fixed seed per user, question and run index (the same across processes and machines)."""
    h = hashlib.sha256(("%s\n%s\n%d" % (user, question, run)).encode("utf-8")).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# HTTP


class Client:
    """A keep-alive connection per thread (http.client); JSON in, JSON out."""

    def __init__(self, base_url, tenant, api_key=None, timeout=600.0):
        u = urllib.parse.urlparse(base_url if "://" in base_url else "http://" + base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise EvalError("--base-url %r is not an http(s) URL" % base_url)
        self.base_url = base_url
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        root = u.path.rstrip("/")
        self.root = root[:-3] if root.endswith("/v1") else root  # accept .../v1 as OpenAI clients write it
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if tenant:
            self.headers["X-InferScale-Tenant"] = tenant
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key
        self.timeout = timeout
        self.local = threading.local()
        self.all_conns = []
        self.lock = threading.Lock()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            c = cls(self.host, self.port, timeout=self.timeout)
            self.local.conn = c
            with self.lock:
                self.all_conns.append(c)
        return c

    def _drop(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
        self.local.conn = None

    def close(self):
        with self.lock:
            for c in self.all_conns:
                c.close()
            self.all_conns = []

    def request(self, method, path, body=None, what=None, headers=None, ok_statuses=(), retries=4):
        """The answer's JSON; raises EvalError naming the request on a refusal or a lost server.

        Retries a connection the server closed while idle (keep-alive), and 429 / 503 after their
        Retry-After; a status in ok_statuses is returned as (status, json) instead of raised."""
        label = "%s %s%s" % (method, path, " (%s)" % what if what else "")
        data = None if body is None else json.dumps(body).encode("utf-8")
        hdrs = dict(self.headers)
        if headers:
            hdrs.update(headers)
        last = None
        for attempt in range(retries + 1):
            try:
                c = self._conn()
                c.request(method, self.root + path, body=data, headers=hdrs)
                r = c.getresponse()
                raw = r.read()
            except (ConnectionRefusedError, socket.gaierror) as e:
                self._drop()
                raise EvalError("cannot reach the server at %s (%s): %s" % (self.base_url, label, e))
            except socket.timeout:
                self._drop()
                raise EvalError("%s: no answer within %g s" % (label, self.timeout))
            except (http.client.HTTPException, ConnectionError, OSError) as e:
                # A keep-alive connection the server closed while idle fails on first use: reconnect.
                self._drop()
                last = e
                if attempt < retries:
                    time.sleep(0.2 * attempt)
                    continue
                raise EvalError("%s: the connection to %s failed: %s" % (label, self.base_url, e or type(e).__name__))
            if r.getheader("Connection", "").lower() == "close":
                self._drop()
            try:
                j = json.loads(raw.decode("utf-8")) if raw else None
            except ValueError:
                j = None
            if r.status in (429, 503) and attempt < retries:
                try:
                    wait = float(r.getheader("Retry-After") or 1)
                except ValueError:
                    wait = 1.0
                time.sleep(min(wait, 10.0))
                continue
            if 200 <= r.status < 300:
                if j is None and raw:
                    raise EvalError("%s -> %d with a body that is not JSON: %r" % (label, r.status, raw[:200]))
                return (r.status, j) if ok_statuses else j
            if r.status in ok_statuses:
                return r.status, j
            raise EvalError("%s -> HTTP %d: %s%s" % (label, r.status, error_text(j, raw), hint(r.status, j)))
        raise EvalError("%s: gave up after %d tries (%s)" % (label, retries + 1, last))


def error_text(j, raw):
    if isinstance(j, dict) and isinstance(j.get("error"), dict):
        e = j["error"]
        parts = [str(e.get("code") or e.get("type") or "error"), str(e.get("message", ""))]
        if e.get("param"):
            parts.append("(param %s)" % e["param"])
        return " ".join(p for p in parts if p)
    return raw[:300].decode("utf-8", "replace") if raw else "(empty body)"


def hint(status, j):
    code = (j or {}).get("error", {}).get("code") if isinstance(j, dict) and isinstance(j.get("error"), dict) else None
    if code == "memory_disabled":
        return " -- start the server with --data-dir"
    if code == "tenant_mismatch":
        return " -- with --api-key, pass the key's tenant as --tenant (or --tenant '')"
    if status == 401:
        return " -- the server has --api-keys: pass --api-key"
    return ""


def quote(user):
    return urllib.parse.quote(user, safe="")


# ---------------------------------------------------------------------------------------------
# Writing the facts


def fact_record(user, f):
    r = {"text": f["text"], "speaker": user["name"]}
    if f.get("date"):
        r["date"] = f["date"]
    if f.get("topic"):
        r["metadata"] = {"topic": f["topic"]}
    return r


def write_user(client, user, how, run_id):
    """Forgets the user, writes its facts in the file's order; the facts' ids in that order."""
    path = "/v1/memory/users/%s" % quote(user["id"])
    status, _ = client.request("DELETE", path, what="forget user %s" % user["id"], ok_statuses=(404,))
    # 404: the user had no facts (a user exists only while it has one)
    records = [fact_record(user, f) for f in user["facts"]]
    body = {"facts": records} if how == "facts" else {"conversation": CONVERSATION, "turns": records}
    # An Idempotency-Key unique to this run, so a retried write (a dropped connection) writes once.
    j = client.request("POST", path + "/facts", body, what="write %d %s of user %s" % (len(records), how, user["id"]),
                       headers={"Idempotency-Key": "%s-%s-%s" % (PROG, run_id, hashlib.sha256(
                           user["id"].encode()).hexdigest()[:16])})
    ids = (j or {}).get("ids")
    if not isinstance(ids, list) or len(ids) != len(records):
        raise EvalError("POST %s/facts (user %s) answered %r, expected %d ids" % (path, user["id"], j, len(records)))
    return ids


# ---------------------------------------------------------------------------------------------
# Jobs


def q_key(uid, fi, qi):
    return "%s|%d|%d" % (uid, fi, qi)


def search_job(client, args, u, fi, qi, q, fact_id):
    t0 = time.time()
    j = client.request("POST", "/v1/memory/users/%s/search" % quote(u["id"]), {"query": q, "k": args.k},
                       what="search of user %s for %r" % (u["id"], q))
    ids = [r.get("id") for r in (j or {}).get("data", [])]
    rank = ids.index(fact_id) + 1 if fact_id in ids else None
    f = u["facts"][fi]
    return {"key": q_key(u["id"], fi, qi), "user": u["id"], "fact_index": fi, "question_index": qi,
            "topic": f.get("topic"), "question": q, "fact_id": fact_id, "k": args.k, "retrieved": ids,
            "hit": rank is not None, "rank": rank, "latency_s": round(time.time() - t0, 4)}


def answer_job(client, args, model, u, fi, qi, q, fact_id, mode, sampling, run, retrieved):
    f = u["facts"][fi]
    body = {"model": model, "messages": [{"role": "user", "content": q}], "max_tokens": args.max_tokens,
            "memory": {"user": u["id"], "k": args.k, "mode": mode}}
    seed = None
    if sampling == "greedy":
        body["temperature"] = 0
    else:  # the server's sampling defaults; a fixed seed so that a rerun draws the same tokens
        seed = seed_of(u["id"], q, run)
        body["seed"] = seed
    t0 = time.time()
    j = client.request("POST", "/v1/chat/completions", body,
                       what="user %s, question %r, mode %s, %s%s" % (
                           u["id"], q, mode, sampling, "" if seed is None else " seed %d" % seed))
    latency = time.time() - t0
    try:
        choice = j["choices"][0]
        answer = choice["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        raise EvalError("POST /v1/chat/completions (user %s, question %r) answered without a message: %s" % (
            u["id"], q, json.dumps(j)[:300]))
    mem = j.get("memory") if isinstance(j.get("memory"), dict) else None
    used = [x.get("id") for x in mem.get("facts", [])] if mem else []
    usage = j.get("usage") or {}
    return {"key": "%s|%s|%s|%d" % (q_key(u["id"], fi, qi), mode, sampling, run), "user": u["id"], "fact_index": fi,
            "question_index": qi, "topic": f.get("topic"), "question": q, "fact_text": f["text"], "keys": f["key"],
            "fact_id": fact_id, "write": args.write, "k": args.k, "mode": mode, "sampling": sampling, "run": run,
            "seed": seed, "answer": answer, "correct": is_correct(answer, f["key"]),
            "finish_reason": choice.get("finish_reason"), "retrieved": retrieved,
            "memory_mode": mem.get("mode") if mem else None, "memory_facts": used,
            "fact_in_context": (fact_id in used) if mem and mode != "off" else None,
            "fallback": mem.get("fallback") if mem else None,
            "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
            "latency_s": round(latency, 4)}


class Progress:
    def __init__(self, label, total):
        self.label, self.total, self.done, self.correct = label, total, 0, 0
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def tick(self, correct=None):
        with self.lock:
            self.done += 1
            self.correct += bool(correct)
            now = time.time()
            if not self.tty and self.done != self.total and now - self.last < 10:
                return  # a line every 10 s when stderr is a file
            self.last = now
            el = now - self.t0
            rate = self.done / el if el > 0 else 0.0
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            acc = "  correct %.1f%%" % (100.0 * self.correct / self.done) if correct is not None else ""
            line = "%s %d/%d  %.2f/s  elapsed %s  ETA %s%s" % (
                self.label, self.done, self.total, rate, hms(el), hms(eta), acc)
            sys.stderr.write(("\r" + line + "   ") if self.tty else (line + "\n"))
            sys.stderr.flush()

    def end(self):
        if self.tty:
            sys.stderr.write("\n")


def hms(s):
    return time.strftime("%H:%M:%S", time.gmtime(s)) if math.isfinite(s) else "--:--:--"


def run_pool(jobs, fn, concurrency, progress, sink):
    """Runs fn(job) on a pool; sink(result) in the caller's lock; stops at the first error."""
    stop = threading.Event()
    errors = []
    lock = threading.Lock()

    def work(job):
        if stop.is_set():
            return
        try:
            r = fn(job)
        except EvalError as e:
            errors.append(str(e))
            stop.set()
            return
        except Exception as e:  # a bug or an unexpected answer: still one line, naming the job
            errors.append("%s: %s" % (type(e).__name__, e))
            stop.set()
            return
        with lock:
            sink(r)
        progress.tick(r.get("correct") if "correct" in r else None)

    with ThreadPoolExecutor(max(1, concurrency)) as ex:
        for _ in ex.map(work, jobs):
            pass
    progress.end()
    if errors:
        raise EvalError(errors[0])


# ---------------------------------------------------------------------------------------------
# Summary


def pct(a, b):
    return 100.0 * a / b if b else None


def summarize(preds, retrieval, meta):
    combos = collections.OrderedDict()
    order = {m: i for i, m in enumerate(MODES)}
    sorder = {s: i for i, s in enumerate(SAMPLINGS)}
    for r in sorted(preds, key=lambda r: (order.get(r["mode"], 9), sorder.get(r["sampling"], 9), r["mode"], r["sampling"])):
        combos.setdefault((r["mode"], r["sampling"]), []).append(r)
    table = []
    for (mode, sampling), rs in combos.items():
        runs = sorted({r["run"] for r in rs})
        per_run = []
        for run in runs:
            xs = [r for r in rs if r["run"] == run]
            per_run.append(pct(sum(r["correct"] for r in xs), len(xs)))
        ctx = [r["fact_in_context"] for r in rs if r.get("fact_in_context") is not None]
        with_fact = [r["correct"] for r in rs if r.get("fact_in_context")]
        row = {"mode": mode, "sampling": sampling, "n": len(rs), "correct": sum(r["correct"] for r in rs),
               "accuracy": sum(per_run) / len(per_run) if per_run else None,  # the mean over seeds
               "runs": len(runs), "accuracy_per_run": per_run,
               "fact_in_context": pct(sum(ctx), len(ctx)) if ctx else None,
               "accuracy_with_fact": pct(sum(with_fact), len(with_fact)) if with_fact else None,
               "fallbacks": sum(1 for r in rs if r.get("fallback")),
               "latency_p50_s": sorted(r["latency_s"] for r in rs)[len(rs) // 2]}
        table.append(row)

    rec = None
    if retrieval:
        hits = sum(r["hit"] for r in retrieval)
        rec = {"k": retrieval[0]["k"], "n": len(retrieval), "hits": hits, "recall": hits / len(retrieval),
               "mrr": sum(1.0 / r["rank"] for r in retrieval if r["rank"]) / len(retrieval)}

    topics = collections.OrderedDict()
    for r in sorted(retrieval, key=lambda r: r.get("topic") or ""):
        t = topics.setdefault(r.get("topic") or "-", {"questions": 0, "hits": 0, "accuracy": {}})
        t["questions"] += 1
        t["hits"] += r["hit"]
    acc = collections.defaultdict(lambda: [0, 0])
    for r in preds:
        a = acc[(r.get("topic") or "-", "%s/%s" % (r["mode"], r["sampling"]))]
        a[0] += r["correct"]
        a[1] += 1
        topics.setdefault(r.get("topic") or "-", {"questions": 0, "hits": 0, "accuracy": {}})
    for (topic, combo), (c, n) in acc.items():
        topics[topic]["accuracy"][combo] = pct(c, n)
    for t in topics.values():
        t["recall"] = t["hits"] / t["questions"] if t["questions"] else None

    users = sorted({r["user"] for r in retrieval} | {r["user"] for r in preds})
    return {"data": meta.get("data"), "base_url": meta.get("base_url"), "model": meta.get("model"),
            "write": meta.get("write"), "k": meta.get("k"), "max_tokens": meta.get("max_tokens"),
            "tenant": meta.get("tenant"), "users": users,
            "facts": len({(r["user"], r["fact_index"]) for r in retrieval} | {(r["user"], r["fact_index"]) for r in preds}),
            "questions": len({r["key"] for r in retrieval} | {q_key(r["user"], r["fact_index"], r["question_index"])
                                                               for r in preds}),
            "recall": rec, "table": table, "topics": topics}


def fmt(v, spec="%.1f"):
    return "" if v is None else spec % v


def markdown(s):
    lines = ["# Personal facts: %s" % (s.get("model") or "?"), ""]
    lines.append("Write mode `%s`, k = %s, max_tokens %s; %d users (%s), %d facts asked about, %d questions." % (
        s.get("write"), s.get("k"), s.get("max_tokens"), len(s["users"]), ", ".join(s["users"]), s["facts"],
        s["questions"]))
    lines.append("")
    rec = s.get("recall")
    if rec:
        lines.append("Retrieval: recall@%d = %.3f (%d/%d questions found their fact), MRR %.3f." % (
            rec["k"], rec["recall"], rec["hits"], rec["n"], rec["mrr"]))
        lines.append("")
    if s["table"]:
        lines += ["| mode | sampling | accuracy (%) | n | runs | fact in context (%) | accuracy with the fact in context (%) "
                  "| fallbacks | latency p50 (s) |", "|---|---|---|---|---|---|---|---|---|"]
        for r in s["table"]:
            runs = str(r["runs"])
            if r["runs"] > 1:
                runs += " (%s)" % ", ".join(fmt(x) for x in r["accuracy_per_run"])
            lines.append("| %s | %s | %s | %d | %s | %s | %s | %d | %s |" % (
                r["mode"], r["sampling"], fmt(r["accuracy"]), r["n"], runs, fmt(r["fact_in_context"]),
                fmt(r.get("accuracy_with_fact")), r["fallbacks"], fmt(r["latency_p50_s"], "%.2f")))
        lines.append("")
    if s["topics"]:
        combos = ["%s/%s" % (r["mode"], r["sampling"]) for r in s["table"]]
        lines.append("Per topic: recall@%s and accuracy (%%) per mode/sampling." % s.get("k"))
        lines.append("")
        lines.append("| topic | questions | recall | " + " | ".join(combos) + " |")
        lines.append("|---|---|---|" + "---|" * len(combos))
        for topic, t in s["topics"].items():
            lines.append("| %s | %d | %s | %s |" % (topic, t["questions"], fmt(t["recall"], "%.2f"),
                                                    " | ".join(fmt(t["accuracy"].get(c)) for c in combos)))
        lines.append("")
    return "\n".join(lines)


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError as e:
                    raise EvalError("%s line %d is not JSON: %s" % (path, n, e))
    return out


def write_summary(out_dir, preds, retrieval, meta):
    s = summarize(preds, retrieval, meta)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(s, f, indent=1)
        f.write("\n")
    md = markdown(s)
    with open(os.path.join(out_dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write(md)
    return md


def score_only(out_dir):
    preds = read_jsonl(os.path.join(out_dir, "predictions.jsonl"))
    retrieval = read_jsonl(os.path.join(out_dir, "retrieval.jsonl"))
    if not preds and not retrieval:
        raise EvalError("%s holds no predictions.jsonl or retrieval.jsonl to score" % out_dir)
    meta = {}
    if os.path.exists(os.path.join(out_dir, "run.json")):
        with open(os.path.join(out_dir, "run.json"), encoding="utf-8") as f:
            meta = json.load(f)
    for r in preds:  # recompute correctness: the rule may have changed since the run
        r["correct"] = is_correct(r["answer"], r["keys"])
    if not retrieval:  # an older run: take each question's search results from its predictions
        seen = {}
        for r in preds:
            qk = q_key(r["user"], r["fact_index"], r["question_index"])
            if qk not in seen:
                ids = r.get("retrieved") or []
                rank = ids.index(r["fact_id"]) + 1 if r["fact_id"] in ids else None
                seen[qk] = {"key": qk, "user": r["user"], "fact_index": r["fact_index"], "topic": r.get("topic"),
                            "k": r["k"], "hit": rank is not None, "rank": rank}
        retrieval = list(seen.values())
    meta.setdefault("write", preds[0]["write"] if preds else None)
    meta.setdefault("k", retrieval[0]["k"] if retrieval else None)
    return write_summary(out_dir, preds, retrieval, meta)


# ---------------------------------------------------------------------------------------------


def csv_list(allowed, name):
    def parse(s):
        xs = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in xs if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError("unknown %s %s (choose from %s)" % (name, ", ".join(bad), ", ".join(allowed)))
        return list(dict.fromkeys(xs))
    return parse


def run(args):
    data = load_data(args.data)
    users = select_users(data, args.users)
    questions = questions_of(users, args.limit_questions)
    client = Client(args.base_url, args.tenant, args.api_key, args.timeout)
    try:
        models = client.request("GET", "/v1/models", what="the served model")
        model = args.model
        if not model:
            try:
                model = models["data"][0]["id"]
            except (KeyError, IndexError, TypeError):
                raise EvalError("GET /v1/models answered no model: %s" % json.dumps(models)[:300])
        os.makedirs(args.out, exist_ok=True)
        run_id = uuid.uuid4().hex[:12]
        meta = {"data": os.path.abspath(args.data), "base_url": args.base_url, "model": model, "write": args.write,
                "k": args.k, "max_tokens": args.max_tokens, "tenant": args.tenant, "modes": args.modes,
                "samplings": args.samplings, "seeds": args.seeds, "users": [u["id"] for u in users],
                "limit_questions": args.limit_questions, "run_id": run_id,
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with open(os.path.join(args.out, "run.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")

        # 1. Forget and write each user, in the file's order.
        t0 = time.time()
        fact_ids = {}
        for u in users:
            for fi, i in enumerate(write_user(client, u, args.write, run_id)):
                fact_ids[(u["id"], fi)] = i
        n_facts = sum(len(u["facts"]) for u in users)
        sys.stderr.write("%s: wrote %d facts of %d users as %s in %.2f s (model %s, tenant %s)\n" % (
            PROG, n_facts, len(users), args.write, time.time() - t0, model, args.tenant or "(none)"))

        # 2. Retrieval: each question through the search route.
        retrieval = []
        with open(os.path.join(args.out, "retrieval.jsonl"), "w", encoding="utf-8") as f:
            def sink_r(r):
                retrieval.append(r)
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            run_pool(questions, lambda j: search_job(client, args, j[0], j[1], j[2], j[3], fact_ids[(j[0]["id"], j[1])]),
                     args.concurrency, Progress("search", len(questions)), sink_r)
            f.flush()
        retrieved = {r["key"]: r["retrieved"] for r in retrieval}
        hits = sum(r["hit"] for r in retrieval)
        sys.stderr.write("%s: recall@%d %d/%d = %.3f\n" % (PROG, args.k, hits, len(retrieval),
                                                           hits / max(1, len(retrieval))))

        # 3. Answers: question x mode x sampling (x seed for the default sampling).
        jobs = []
        for (u, fi, qi, q) in questions:
            for mode in args.modes:
                for sampling in args.samplings:
                    for run_ix in (range(args.seeds) if sampling == "default" else [0]):
                        jobs.append((u, fi, qi, q, mode, sampling, run_ix))
        preds = []
        with open(os.path.join(args.out, "predictions.jsonl"), "w", encoding="utf-8") as f:
            def sink_p(r):
                preds.append(r)
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
                f.flush()
            try:
                run_pool(jobs, lambda j: answer_job(client, args, model, j[0], j[1], j[2], j[3],
                                                    fact_ids[(j[0]["id"], j[1])], j[4], j[5], j[6],
                                                    retrieved[q_key(j[0]["id"], j[1], j[2])]),
                         args.concurrency, Progress("answers", len(jobs)), sink_p)
            finally:
                if preds:
                    write_summary(args.out, preds, retrieval, meta)
        meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta["seconds"] = round(time.time() - t0, 1)
        with open(os.path.join(args.out, "run.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        return write_summary(args.out, preds, retrieval, meta)
    finally:
        client.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server (a trailing /v1 is accepted)")
    ap.add_argument("--api-key", default=os.environ.get("INFERSCALE_API_KEY"),
                    help="sent as Authorization: Bearer KEY (default: $INFERSCALE_API_KEY)")
    ap.add_argument("--tenant", default="personal-facts-eval",
                    help="X-InferScale-Tenant of every request ('' sends none; with --api-key, the key's tenant)")
    ap.add_argument("--data", default=DEFAULT_DATA, help="the data set")
    ap.add_argument("--write", choices=("facts", "turns"), default="facts",
                    help="write the facts as free-standing facts, or as the turns of one conversation")
    ap.add_argument("--users", type=lambda s: [x.strip() for x in s.split(",") if x.strip()], default=None,
                    help="comma-separated user ids (default: all)")
    ap.add_argument("--limit-questions", type=int, default=0, help="only the first N questions (0: all)")
    ap.add_argument("--k", type=int, default=5, help="facts retrieved per question (search top_k and memory.k)")
    ap.add_argument("--modes", type=csv_list(MODES, "mode"), default=list(MODES), help="memory modes")
    ap.add_argument("--samplings", type=csv_list(SAMPLINGS, "sampling"), default=list(SAMPLINGS),
                    help="greedy (temperature 0) and/or default (the server's sampling defaults, seeded)")
    ap.add_argument("--seeds", type=int, default=1, help="runs of the default sampling, each with its own seeds")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--model", default=None, help="default: the first model GET /v1/models lists")
    ap.add_argument("--concurrency", type=int, default=2, help="requests in flight")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for one answer")
    ap.add_argument("--out", default=None, help="output directory (required unless --score-only)")
    ap.add_argument("--score-only", metavar="DIR", default=None,
                    help="recompute DIR/summary.json and summary.md from DIR/predictions.jsonl; no server needed")
    args = ap.parse_args()
    try:
        if args.score_only:
            print(score_only(args.score_only))
            return
        if not args.out:
            ap.error("--out DIR is required (or --score-only DIR)")
        if args.k < 1 or args.k > 256:
            ap.error("--k must be in 1..256 (the search route's limits)")
        if args.seeds < 1:
            ap.error("--seeds must be at least 1")
        if args.limit_questions < 0 or args.max_tokens < 1 or args.concurrency < 1:
            ap.error("--limit-questions must be >= 0, --max-tokens and --concurrency >= 1")
        if not args.modes or not args.samplings:
            ap.error("--modes and --samplings need at least one value")
        print(run(args))
    except EvalError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted", 130)


if __name__ == "__main__":
    main()
