#!/usr/bin/env python3
"""LoCoMo answer quality of memory modes, against any OpenAI-compatible endpoint with InferScale's
`memory` extension (docs/API.md).

    bench/locomo_eval.py --base-url http://127.0.0.1:8000/v1 --data ../shared/data/locomo/locomo10.json \
        --convs conv-26 --k 5,10,20,50 --w 0,2,5 --modes off,text,inject --out results/locomo-smollm2

What it does:
1. Imports the chosen conversations through the memory REST API (one user per sample_id, the turns
   as conversation turns with their session dates), unless the server already holds exactly them.
2. Asks every non-adversarial question (categories 1-4) in each configuration: `off` once, `text`
   per k, `inject` per (k, w) [and per --recompute value], greedy, with LoCoMo's short-answer prompt.
3. Scores LoCoMo's token F1 as its official scorer (task_eval/evaluation.py) does: normalize
   (lowercase, drop punctuation, the words a/an/the/and, commas), Porter-stem, token F1; multi-hop
   (category 1) answers are split on ',' (mean over gold parts of the best predicted part);
   open-domain (category 3) gold answers keep the part before ';'.
4. Scores the gold answer's negative log-likelihood under each configuration, teacher-forced through
   the server: the conversation plus the gold answer as an open final assistant message
   (`continue_final_message`) with `prompt_logprobs: 0`; the answer tokens are those after the
   generation request's prompt. Far less noisy than F1 for a small model. `--no-nll` skips it.
5. Writes DIR/predictions.jsonl (one line per question and configuration; a rerun skips the lines
   already there, so an interrupted run resumes), DIR/summary.json and DIR/summary.md, with a
   progress bar and ETA on stderr. `--score-only` recomputes the summary from predictions.jsonl.

Only the standard library and nltk (its Porter stemmer, as the official scorer) are needed.
"""
import argparse
import collections
import http.client
import json
import math
import os
import random
import re
import string
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

# The question as the user's message. "memory" (the default) suits small chat models: with LoCoMo's
# own prompt ("locomo") SmolLM2-135M-Instruct repeats the question instead of answering (F1 0 in
# every mode on a first conv-26 sample); with "memory" text beats off (0.143 vs 0.083 on 14 questions).
# bench_quality_locomo.cpp has the same presets (keep them equal).
PROMPTS = {
    "memory": "Use the memories above to answer.\nQuestion: {}\nAnswer in a few words:",
    "locomo": ("Based on the above context, write an answer in the form of a short phrase for the following "
               "question. Answer with exact words from the context whenever possible.\n\nQuestion: {} Short answer:"),
}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TENANT = "locomo-eval"

# ---------------------------------------------------------------------------------------------
# Scoring (LoCoMo's official F1)

try:
    from nltk.stem import PorterStemmer
    _STEM = PorterStemmer().stem
except ImportError:  # pragma: no cover
    _STEM = None


def normalize_answer(s):
    s = str(s).replace(",", "")
    s = re.sub(r"\b(a|an|the|and)\b", " ", s, flags=re.IGNORECASE)
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    return " ".join(s.lower().split())


def f1_score(prediction, gold):
    p = [_STEM(w) for w in normalize_answer(prediction).split()]
    g = [_STEM(w) for w in normalize_answer(gold).split()]
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction, gold):
    preds = [x.strip() for x in str(prediction).split(",")]
    golds = [x.strip() for x in str(gold).split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


def score_answer(category, prediction, gold):
    gold = str(gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return f1_multi(prediction, gold)
    return f1_score(prediction, gold)


# ---------------------------------------------------------------------------------------------
# HTTP


class Client:
    """One keep-alive connection per thread to the server."""

    def __init__(self, base_url, api_key=None, timeout=600):
        u = urllib.parse.urlparse(base_url)
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.https = u.scheme == "https"
        self.root = u.path.rstrip("/")
        if self.root.endswith("/v1"):
            self.root = self.root[:-3]
        self.headers = {"Content-Type": "application/json", "X-InferScale-Tenant": TENANT}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key
        self.timeout = timeout
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            c = cls(self.host, self.port, timeout=self.timeout)
            self.local.conn = c
        return c

    def request(self, method, path, body=None, retries=5):
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(retries):
            try:
                c = self._conn()
                c.request(method, self.root + path, body=data, headers=self.headers)
                r = c.getresponse()
                text = r.read().decode()
                if r.status in (429, 503) and attempt + 1 < retries:
                    time.sleep(float(r.getheader("Retry-After") or 1))
                    continue
                return r.status, (json.loads(text) if text else None)
            except (http.client.HTTPException, ConnectionError, OSError):
                self.local.conn = None
                if attempt + 1 == retries:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise RuntimeError("unreachable")

    def ok(self, method, path, body=None):
        status, j = self.request(method, path, body)
        if status >= 300:
            raise RuntimeError("%s %s -> %d %s" % (method, path, status, json.dumps(j)[:400]))
        return j


# ---------------------------------------------------------------------------------------------
# Data


def load_conversations(path, names):
    data = json.load(open(path))
    if names != ["all"]:
        keep = set(names)
        data = [c for c in data if c["sample_id"] in keep]
        missing = keep - {c["sample_id"] for c in data}
        if missing:
            sys.exit("locomo_eval: no conversation named %s in %s" % (", ".join(sorted(missing)), path))
    return data


def sessions(conv):
    c = conv["conversation"]
    nums = sorted(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k) and isinstance(c[k], list))
    return [(n, c.get("session_%d_date_time" % n, ""), c["session_%d" % n]) for n in nums]


def turns_of(conv):
    out = []
    for n, date, turns in sessions(conv):
        for t in turns:
            if not str(t.get("text", "")).strip():
                continue
            out.append({"text": t["text"], "speaker": t["speaker"], "date": date or None,
                        "source": {"session": "session_%d" % n, "turn": t["dia_id"]}})
    return out


def questions_of(conv, limit):
    qs = [(i, q) for i, q in enumerate(conv["qa"]) if q.get("category") in CATEGORIES and "answer" in q]
    if limit and len(qs) > limit:  # a deterministic, category-mixed subset
        qs = sorted(random.Random(conv["sample_id"]).sample(qs, limit))
    return qs


def import_conversation(client, conv):
    user = conv["sample_id"]
    turns = turns_of(conv)
    status, j = client.request("GET", "/v1/memory/users/" + urllib.parse.quote(user, safe=""))
    if status == 200 and j.get("facts") == len(turns):
        return False
    if status == 200:
        client.ok("DELETE", "/v1/memory/users/" + urllib.parse.quote(user, safe=""))
    for i in range(0, len(turns), 2000):
        client.ok("POST", "/v1/memory/users/%s/facts" % urllib.parse.quote(user, safe=""),
                  {"conversation": user, "turns": turns[i:i + 2000]})
    return True


# ---------------------------------------------------------------------------------------------
# Configurations and jobs


def configs(args):
    out = []
    if "off" in args.modes:
        out.append({"mode": "off", "k": 0, "w": 0, "recompute": 0, "recompute_last": 0})
    for k in args.k:
        if "text" in args.modes:
            out.append({"mode": "text", "k": k, "w": 0, "recompute": 0, "recompute_last": 0})
        if "inject" in args.modes:
            # --recompute-last fractions of k, rounded down to whole facts, each once.
            lasts = sorted({int(f * k + 1e-9) for f in args.recompute_last})
            for w in args.w:
                for r in args.recompute:
                    for m in lasts:
                        for a in args.recompute_attention:
                            out.append({"mode": "inject", "k": k, "w": w, "recompute": r, "recompute_last": m,
                                        "recompute_attention": a})
    return out


def config_name(c):
    if c["mode"] == "off":
        return "off"
    if c["mode"] == "text":
        return "text k=%d" % c["k"]
    return ("inject k=%d w=%d" % (c["k"], c["w"]) + (" r=%g" % c["recompute"] if c["recompute"] else "")
            + (" m=%d" % c["recompute_last"] if c.get("recompute_last") else "")
            + (" a=%g" % c["recompute_attention"] if c.get("recompute_attention") else ""))


def job_key(conv_id, qi, c):
    key = "%s|%d|%s|%d|%d|%g" % (conv_id, qi, c["mode"], c["k"], c["w"], c["recompute"])
    key += "|m%d" % c["recompute_last"] if c.get("recompute_last") else ""
    return key + ("|a%g" % c["recompute_attention"] if c.get("recompute_attention") else "")


def memory_object(user, question, c):
    m = {"user": user, "mode": c["mode"], "k": c["k"], "w": c["w"], "query": question}
    if c["recompute"]:
        m["recompute"] = c["recompute"]
    if c.get("recompute_last"):
        m["recompute_last"] = c["recompute_last"]
    if c.get("recompute_attention"):
        m["recompute_attention"] = c["recompute_attention"]
    return m


def run_job(client, args, model, conv_id, qi, q, c):
    question = q["question"]
    messages = [{"role": "user", "content": PROMPTS[args.prompt].format(question)}]
    body = {"model": model, "messages": messages, "max_tokens": args.max_tokens, "temperature": 0,
            "memory": memory_object(conv_id, question, c)}
    t0 = time.time()
    r = client.ok("POST", "/v1/chat/completions", body)
    latency = time.time() - t0
    pred = r["choices"][0]["message"]["content"].strip()
    mem = r.get("memory") or {}
    out = {"key": job_key(conv_id, qi, c), "conversation": conv_id, "question_index": qi, "category": q["category"],
           "question": question, "gold": str(q["answer"]), "config": config_name(c), **c, "prediction": pred,
           "f1": score_answer(q["category"], pred, q["answer"]), "latency_s": latency,
           "prompt_tokens": r["usage"]["prompt_tokens"], "fallback": mem.get("fallback"),
           "facts": [f.get("id") for f in mem.get("facts", [])], "injected_tokens": mem.get("injected_tokens", 0),
           "recomputed_tokens": mem.get("recomputed_tokens", 0)}
    if args.nll:
        score = dict(body)
        score["messages"] = messages + [{"role": "assistant", "content": str(q["answer"])}]
        score.update({"max_tokens": 1, "add_generation_prompt": False, "continue_final_message": True,
                      "prompt_logprobs": 0})
        s = client.ok("POST", "/v1/chat/completions", score)
        plp = s["choices"][0].get("prompt_logprobs")
        if plp is None:
            plp = s.get("prompt_logprobs")
        start = out["prompt_tokens"]
        lps = []
        for entry in plp[start:]:
            if not entry:
                raise RuntimeError("no prompt logprob for an answer token (%s)" % out["key"])
            # vLLM's shape: {token_id: {logprob, rank, decoded_token}}; with prompt_logprobs 0 it holds
            # the actual token alone.
            if len(entry) != 1:
                raise RuntimeError("expected one prompt logprob per token, got %d (%s)" % (len(entry), out["key"]))
            lps.append(next(iter(entry.values()))["logprob"])
        if not lps:
            raise RuntimeError("the gold answer has no tokens after the prompt (%s)" % out["key"])
        out["answer_tokens"] = len(lps)
        out["nll_sum"] = -sum(lps)
    return out


# ---------------------------------------------------------------------------------------------
# Summary


def bootstrap_ci(values, iters=1000, seed=0):
    if len(values) < 2:
        return [float("nan"), float("nan")]
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(iters))
    return [means[int(0.025 * iters)], means[int(0.975 * iters) - 1]]


def summarize(rows, args):
    by = collections.OrderedDict()
    for r in sorted(rows, key=lambda r: (r["mode"] != "off", r["mode"] != "text", r["k"], r["w"], r["recompute"],
                                         r.get("recompute_last", 0), r.get("recompute_attention", 0))):
        by.setdefault(r["config"], []).append(r)
    table = []
    for name, rs in by.items():
        f1s = [r["f1"] for r in rs]
        row = {"config": name, "mode": rs[0]["mode"], "k": rs[0]["k"], "w": rs[0]["w"], "recompute": rs[0]["recompute"],
               "recompute_last": rs[0].get("recompute_last", 0),
               "recompute_attention": rs[0].get("recompute_attention", 0), "questions": len(rs), "f1": sum(f1s) / len(f1s), "f1_ci95": bootstrap_ci(f1s),
               "fallbacks": sum(1 for r in rs if r.get("fallback")),
               "latency_p50_s": sorted(r["latency_s"] for r in rs)[len(rs) // 2]}
        for cat, cname in CATEGORIES.items():
            cs = [r["f1"] for r in rs if r["category"] == cat]
            row["f1_" + cname] = sum(cs) / len(cs) if cs else None
            row["n_" + cname] = len(cs)
        fact_tokens = sum(r.get("injected_tokens", 0) + r.get("recomputed_tokens", 0) for r in rs)
        if row["mode"] == "inject" and fact_tokens:
            row["recomputed_fraction"] = sum(r.get("recomputed_tokens", 0) for r in rs) / fact_tokens
        if all("nll_sum" in r for r in rs):
            row["nll_per_token"] = sum(r["nll_sum"] for r in rs) / sum(r["answer_tokens"] for r in rs)
        table.append(row)
    # Paired: inject against text at the same k, question by question (the same questions and facts),
    # with a bootstrap 95% interval of the F1 ratio over resampled questions.
    text = {r["k"]: r for r in table if r["mode"] == "text"}
    text_rows = {name: {(r["conversation"], r["question_index"]): r for r in rs} for name, rs in by.items()}
    for row in table:
        t = text.get(row["k"]) if row["mode"] == "inject" else None
        if t and t["f1"] > 0:
            row["f1_vs_text"] = row["f1"] / t["f1"]
            # (category, this config's F1, text's F1) per question both answered.
            paired = [(r["category"], r["f1"], text_rows[t["config"]][q]["f1"])
                      for q, r in text_rows[row["config"]].items() if q in text_rows[t["config"]]]
            row["f1_vs_text_ci95"] = paired_ratio_ci([(a, b) for _, a, b in paired])
            # The same ratio within each category (the category's questions only).
            for cat, cname in CATEGORIES.items():
                cat_pairs = [(a, b) for c, a, b in paired if c == cat]
                text_sum = sum(b for _, b in cat_pairs)
                if text_sum > 0:
                    row["f1_vs_text_" + cname] = sum(a for a, _ in cat_pairs) / text_sum
                    row["f1_vs_text_" + cname + "_ci95"] = paired_ratio_ci(cat_pairs)
        if t and row.get("nll_per_token") and t.get("nll_per_token"):
            row["nll_vs_text"] = row["nll_per_token"] / t["nll_per_token"]
    return table


def paired_ratio_ci(pairs, iters=1000, seed=0):
    """Bootstrap 95% interval of sum(a) / sum(b) over resampled (a, b) question pairs."""
    if len(pairs) < 2:
        return [float("nan"), float("nan")]
    rng = random.Random(seed)
    n, ratios = len(pairs), []
    for _ in range(iters):
        sa = sb = 0.0
        for _ in range(n):
            a, b = pairs[rng.randrange(n)]
            sa, sb = sa + a, sb + b
        ratios.append(sa / sb if sb > 0 else float("nan"))
    ratios.sort()
    return [ratios[int(0.025 * iters)], ratios[int(0.975 * iters) - 1]]


def markdown(table):
    cols = ["config", "questions", "f1", "f1_ci95", "f1_multi-hop", "f1_temporal", "f1_open-domain", "f1_single-hop",
            "nll_per_token", "f1_vs_text", "f1_vs_text_ci95", "nll_vs_text", "recomputed_fraction", "fallbacks"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table:
        cells = []
        for c in cols:
            v = row.get(c)
            if v is None:
                cells.append("")
            elif isinstance(v, list):
                cells.append("%.3f-%.3f" % tuple(v))
            elif isinstance(v, float):
                cells.append("%.3f" % v)
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    # Per category, inject's F1 over text's at the same k, paired, with its 95% interval.
    ratio_rows = [row for row in table if "f1_vs_text" in row]
    if ratio_rows:
        lines += ["", "| config | " + " | ".join("%s / text (95%% CI)" % c for c in CATEGORIES.values()) + " |",
                  "|---|" + "---|" * len(CATEGORIES)]
        for row in ratio_rows:
            cells = []
            for c in CATEGORIES.values():
                v = row.get("f1_vs_text_" + c)
                cells.append("" if v is None else "%.3f (%.3f-%.3f)" % tuple([v] + row["f1_vs_text_" + c + "_ci95"]))
            lines.append("| %s | %s |" % (row["config"], " | ".join(cells)))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


class Progress:
    def __init__(self, total, done):
        self.total, self.done, self.start_done = total, done, done
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.errors = 0

    def tick(self, error=False):
        with self.lock:
            self.done += 1
            self.errors += error
            rate = (self.done - self.start_done) / max(1e-9, time.time() - self.t0)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            width = 30
            fill = int(width * self.done / max(1, self.total))
            sys.stderr.write("\r[%s%s] %d/%d  %.1f/s  ETA %s%s" % (
                "#" * fill, "." * (width - fill), self.done, self.total, rate,
                time.strftime("%H:%M:%S", time.gmtime(eta)) if math.isfinite(eta) else "--:--:--",
                "  errors %d" % self.errors if self.errors else ""))
            sys.stderr.flush()


def int_list(s):
    return [int(x) for x in s.split(",") if x != ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--api-key", default=os.environ.get("INFERSCALE_API_KEY"))
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "locomo",
                                                   "locomo10.json"))
    ap.add_argument("--convs", default="conv-26", help="comma-separated sample_ids, or 'all'")
    ap.add_argument("--max-questions", type=int, default=0, help="per conversation (0: all non-adversarial)")
    ap.add_argument("--k", type=int_list, default=[5, 10, 20, 50])
    ap.add_argument("--w", type=int_list, default=[0, 2, 5])
    ap.add_argument("--recompute", type=lambda s: [float(x) for x in s.split(",")], default=[0.0],
                    help="memory.recompute values for inject (0: none)")
    ap.add_argument("--recompute-last", type=lambda s: [float(x) for x in s.split(",")], default=[0.0],
                    help="memory.recompute_last for inject as fractions of k, rounded down to whole facts "
                         "(0.1: the best-ranked tenth of the facts is computed at serving time)")
    ap.add_argument("--recompute-attention", type=lambda s: [float(x) for x in s.split(",")], default=[0.0],
                    help="memory.recompute_attention for inject: the fraction of fact tokens the question attends to most")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["off", "text", "inject"])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt", choices=sorted(PROMPTS), default="memory", help="how the question is asked")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--no-nll", dest="nll", action="store_false")
    ap.add_argument("--no-import", dest="do_import", action="store_false")
    ap.add_argument("--score-only", action="store_true", help="recompute the summary from predictions.jsonl")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if _STEM is None:
        sys.exit("locomo_eval: needs nltk (pip install nltk) for LoCoMo's Porter-stemmed F1")
    os.makedirs(args.out, exist_ok=True)
    pred_path = os.path.join(args.out, "predictions.jsonl")
    rows = {}
    if os.path.exists(pred_path):
        for line in open(pred_path):
            if line.strip():
                r = json.loads(line)
                rows[r["key"]] = r

    convs = load_conversations(args.data, args.convs.split(","))
    cfgs = configs(args)
    jobs = [(c["sample_id"], qi, q, cfg) for c in convs for qi, q in questions_of(c, args.max_questions) for cfg in cfgs]
    wanted = {job_key(cid, qi, cfg) for cid, qi, _, cfg in jobs}
    if not args.score_only:
        client = Client(args.base_url, args.api_key)
        models = client.ok("GET", "/v1/models")
        model = models["data"][0]["id"]
        if args.do_import:
            for c in convs:
                if import_conversation(client, c):
                    sys.stderr.write("imported %s\n" % c["sample_id"])
        todo = [j for j in jobs if job_key(j[0], j[1], j[3]) not in rows]
        sys.stderr.write("%d questions x %d configurations: %d jobs, %d already done\n" % (
            len(jobs) // max(1, len(cfgs)), len(cfgs), len(jobs), len(jobs) - len(todo)))
        progress = Progress(len(jobs), len(jobs) - len(todo))
        lock = threading.Lock()
        failures = []
        with open(pred_path, "a") as f:
            def work(j):
                try:
                    r = run_job(client, args, model, *j)
                except Exception as e:  # reported and counted; the run goes on
                    failures.append("%s: %s" % (job_key(j[0], j[1], j[3]), e))
                    progress.tick(error=True)
                    return
                with lock:
                    f.write(json.dumps(r) + "\n")
                    f.flush()
                    rows[r["key"]] = r
                progress.tick()
            with ThreadPoolExecutor(args.concurrency) as ex:
                list(ex.map(work, todo))
        sys.stderr.write("\n")
        for msg in failures[:10]:
            sys.stderr.write("error: %s\n" % msg)
        if failures:
            sys.stderr.write("%d jobs failed (rerun to retry them)\n" % len(failures))
    table = summarize([r for k, r in rows.items() if k in wanted], args)
    summary = {"data": os.path.abspath(args.data), "conversations": [c["sample_id"] for c in convs],
               "max_tokens": args.max_tokens, "prompt": PROMPTS[args.prompt], "configs": table}
    json.dump(summary, open(os.path.join(args.out, "summary.json"), "w"), indent=1)
    md = markdown(table)
    open(os.path.join(args.out, "summary.md"), "w").write(md)
    print(md)
    if not args.score_only and failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
