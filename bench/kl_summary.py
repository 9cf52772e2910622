#!/usr/bin/env python3
"""Paired statistics over bench_quality_locomo's --json (its per-question values), and the compact
file docs/results keeps: the configs table, the command and commit, and per inject configuration

  kl_cut             1 - KL(config) / KL(inject at the same k and w, nothing recomputed): the
                     share of the plain inject's KL the recompute removes, token-weighted as the
                     table's KL is
  kl_cut_by_question the same share with each question weighted once (its KL is its mean over its
                     answer tokens; the --json keeps no token counts per question), and
                     kl_cut_by_question_ci95, its paired bootstrap 95% interval over resampled
                     questions
  nll_minus_text     mean over questions of (the config's gold-answer NLL per token - text's at
                     the same k), with a paired bootstrap 95% interval (nll_minus_text_ci95);
                     below 0 is better than text

    .venv/bin/python bench/kl_summary.py --json kl.json --command "bench_quality_locomo ..." \
        --commit 2cbf9e0 --card "H100 80GB HBM3" --out docs/results/x.json
Several --json files of the same model and conversations merge (a config in two runs keeps the
first); per-question values stay out of the output.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from locomo_eval import bootstrap_ci, paired_ratio_ci  # noqa: E402


def plain_inject(row, names):
    """The name of the inject config at the same k and w with nothing recomputed, if present."""
    name = "inject k=%d w=%d" % (row["k"], row["w"])
    return name if name in names and name != row["config"] else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="append", required=True, help="bench_quality_locomo --json (repeatable)")
    ap.add_argument("--command", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--card", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    runs = [json.load(open(p)) for p in args.json]
    configs, seen = [], set()
    for run in runs:
        for row in run["configs"]:
            if row["config"] not in seen:
                seen.add(row["config"])
                configs.append(dict(row))
    # Per-question values by (conversation, question) from the run each config was taken from.
    per_q = {}
    for run in runs:
        for q in run["questions"]:
            key = (q["conversation"], q["question"])
            for name, v in q.items():
                if isinstance(v, dict):
                    per_q.setdefault(name, {}).setdefault(key, v)
    by_name = {r["config"]: r for r in configs}
    for row in configs:
        if row["mode"] != "inject":
            continue
        base = plain_inject(row, by_name)
        if base:
            row["kl_cut"] = 1 - row["kl_per_token"] / by_name[base]["kl_per_token"]
            pairs = [(per_q[row["config"]][k]["kl"], per_q[base][k]["kl"]) for k in per_q[row["config"]]
                     if k in per_q[base]]
            lo, hi = paired_ratio_ci(pairs)
            row["kl_cut_by_question"] = 1 - sum(a for a, _ in pairs) / sum(b for _, b in pairs)
            row["kl_cut_by_question_ci95"] = [1 - hi, 1 - lo]
        text = "text k=%d" % row["k"]
        if text in per_q:
            diffs = [per_q[row["config"]][k]["nll"] - per_q[text][k]["nll"] for k in per_q[row["config"]]
                     if k in per_q[text]]
            row["nll_minus_text"] = sum(diffs) / len(diffs)
            row["nll_minus_text_ci95"] = bootstrap_ci(diffs)
    first = runs[0]
    out = {k: first.get(k) for k in ("model", "backend", "convs", "prompt", "retrieval", "embedder", "neighbours")}
    out.update({"card": args.card, "commit": args.commit, "command": args.command,
                "questions": len(runs[0]["questions"]), "configs": configs})
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print("| config | KL per token | KL cut | KL cut by question (95% CI) | NLL - text by question (95% CI) | recomputed |")
    print("|---|---|---|---|---|---|")
    for r in configs:
        if r["mode"] != "inject":
            continue
        cut = "%.1f%%" % (100 * r["kl_cut"]) if "kl_cut" in r else ""
        cut_q = ("%.1f%% (%.1f-%.1f%%)" % tuple(100 * x for x in [r["kl_cut_by_question"]] + r["kl_cut_by_question_ci95"])
                 if "kl_cut_by_question" in r else "")
        nll = ("%+.4f (%+.4f..%+.4f)" % tuple([r["nll_minus_text"]] + r["nll_minus_text_ci95"])
               if "nll_minus_text" in r else "")
        print("| %s | %.4f | %s | %s | %s | %.1f%% |" % (r["config"], r["kl_per_token"], cut, cut_q, nll,
                                                       100 * r["recomputed_fraction"]))


if __name__ == "__main__":
    main()
