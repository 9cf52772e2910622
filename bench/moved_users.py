#!/usr/bin/env python3
"""The first request of a user that moved to another replica (issue "Scale out", part 5).

Replica A serves each LoCoMo user (a conversation) first: its request at k retrieves and encodes
the user's facts (and, with --kv-dir, writes their KV files). Then the user moves: the same request
goes to replica B, which shares A's store but has none of the user's KV in its pool. B either
encodes the facts again (no shared KV files) or loads them from the KV files A wrote (--kv-dir on
a directory both share). Reported per user and as medians: A's first request, B's first request
(the moved user's), B's second (warm), and what B's first did (facts encoded, loaded from files).

Each request is a non-streamed chat with memory {user, mode inject, k, w, query} and max_tokens 1,
so its latency is the time to the first token plus one HTTP answer. Standard library only; the
import and the LoCoMo helpers are bench/locomo_eval.py's.

  bench/moved_users.py --a http://127.0.0.1:8201 --b http://127.0.0.1:8202 --data locomo10.json \
      [--k 50] [--w 2] [--import] [--label "shared KV files"] [--out results.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import locomo_eval  # noqa: E402


def ask(client, model, user, question, k, w):
    body = {"model": model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": question}],
            "memory": {"user": user, "mode": "inject", "k": k, "w": w, "query": question}}
    t = time.perf_counter()
    j = client.ok("POST", "/v1/chat/completions", body)
    ms = (time.perf_counter() - t) * 1000
    m = j.get("memory", {})
    return {"ms": round(ms, 2), "facts": len(m.get("facts", [])), "encoded": m.get("encoded", 0),
            "loaded": m.get("loaded", 0), "fallback": m.get("fallback")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the replica that serves the users first")
    ap.add_argument("--b", required=True, help="the replica they move to (same store)")
    ap.add_argument("--data", required=True, help="LoCoMo's locomo10.json")
    ap.add_argument("--convs", default="all")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--w", type=int, default=2)
    ap.add_argument("--import", dest="do_import", action="store_true", help="import the conversations through A first")
    ap.add_argument("--skip-a", action="store_true", help="A already served these users (a second run against a new B)")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    convs = locomo_eval.load_conversations(args.data, args.convs.split(","))
    a, b = locomo_eval.Client(args.a), locomo_eval.Client(args.b)
    model = a.ok("GET", "/v1/models")["data"][0]["id"]
    if args.do_import:
        for c in convs:
            locomo_eval.import_conversation(a, c)
    rows = []
    for c in convs:
        user = c["sample_id"]
        _, q = locomo_eval.questions_of(c, 1)[0]
        row = {"user": user}
        if not args.skip_a:
            row["a_first"] = ask(a, model, user, q["question"], args.k, args.w)
        row["b_first"] = ask(b, model, user, q["question"], args.k, args.w)
        row["b_second"] = ask(b, model, user, q["question"], args.k, args.w)
        rows.append(row)
        print(json.dumps(row), flush=True)

    def med(key):
        vals = [r[key]["ms"] for r in rows if key in r]
        return round(statistics.median(vals), 2) if vals else None

    summary = {"label": args.label, "k": args.k, "w": args.w, "users": len(rows),
               "a_first_ms_p50": med("a_first"), "b_first_ms_p50": med("b_first"), "b_second_ms_p50": med("b_second"),
               "b_first_encoded": sum(r["b_first"]["encoded"] for r in rows),
               "b_first_loaded": sum(r["b_first"]["loaded"] for r in rows),
               "b_first_fallbacks": sum(1 for r in rows if r["b_first"]["fallback"])}
    print("summary " + json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
