#!/usr/bin/env python3
"""Draws LoCoMo evidence recall from the JSON of bench_retrieval_locomo and/or
bench/retrieval_reference.py: recall@k over all non-adversarial questions (left) and recall@10 by
category (right). Reference runs are drawn dashed and labelled "(reference)".

    /work/main/.venv/bin/python bench/plot_retrieval.py ours.json ref.json -o docs/retrieval_locomo.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CATS = [("1", "multi-hop"), ("2", "temporal"), ("3", "open-domain"), ("4", "single-hop"), ("all", "all 1-4")]
COLORS = {"bm25": "tab:blue", "dense": "tab:orange", "hybrid": "tab:green"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--bar-k", type=int, default=10)
    a = ap.parse_args()
    series = []
    for path in a.runs:
        with open(path) as f:
            run = json.load(f)
        for mode, m in run["modes"].items():
            label = mode + (" (reference)" if run.get("reference") else " (ours)")
            series.append((label, mode, run.get("reference", False), run["ks"], m["recall"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, mode, ref, ks, recall in series:
        left.plot(ks, [recall["all"][f"recall@{k}"] for k in ks], marker="o", color=COLORS.get(mode),
                  linestyle="--" if ref else "-", label=label)
    left.set_xscale("log")
    left.set_xticks(series[0][3])
    left.set_xticklabels([str(k) for k in series[0][3]])
    left.minorticks_off()
    left.set_xlabel("k (facts retrieved)")
    left.set_ylabel("evidence recall@k")
    left.set_ylim(0, 1)
    left.grid(alpha=0.3)
    left.set_title(f"LoCoMo, all non-adversarial questions (n={series[0][4]['all']['n']})")
    left.legend(fontsize=8)
    width = 0.8 / len(series)
    for i, (label, mode, ref, ks, recall) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(CATS))]
        right.bar(xs, [recall[c][f"recall@{a.bar_k}"] if c in recall else 0 for c, _ in CATS], width,
                  color=COLORS.get(mode), alpha=0.5 if ref else 0.95, hatch="//" if ref else None, label=label)
    right.set_xticks(range(len(CATS)))
    right.set_xticklabels([n for _, n in CATS])
    right.set_ylabel(f"evidence recall@{a.bar_k}")
    right.set_ylim(0, 1)
    right.grid(axis="y", alpha=0.3)
    right.set_title(f"recall@{a.bar_k} by category")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
