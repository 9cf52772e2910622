#!/usr/bin/env python3
"""Plots LoCoMo answer quality of the memory modes against k: F1 (bench/locomo_eval.py's
summary.json) and KL(text || inject) (bench_quality_locomo's --json), one line per mode and window.

    .venv/bin/python bench/plot_quality.py --f1 docs/results/smollm2_locomo_f1_all_h100.json \
        --kl docs/results/smollm2_locomo_kl_all_h100.json --out docs/quality_smollm2_locomo.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--f1", required=True)
    ap.add_argument("--kl", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="SmolLM2-135M-Instruct on LoCoMo")
    args = ap.parse_args()
    f1 = json.load(open(args.f1))["configs"]
    kl = json.load(open(args.kl))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    ks = sorted({r["k"] for r in f1 if r["mode"] == "text"})
    off = next((r for r in f1 if r["mode"] == "off"), None)
    if off:
        a.axhline(off["f1"], color="gray", ls=":", label="off (no memory)")
    # (mode, window, memory.recompute_attention, colour, line); rows with other recompute
    # selectors are left out.
    series = [("text", None, 0, "black", "-")] + \
        [("inject", w, 0, c, "--") for w, c in ((0, "tab:red"), (2, "tab:blue"), (5, "tab:green"))] + \
        [("inject", 2, a, c, ":") for a, c in ((0.1, "tab:purple"), (0.15, "tab:orange"))]

    def pick(rows, mode, w, att):
        return sorted((r for r in rows if r["mode"] == mode and (w is None or r["w"] == w)
                       and not r.get("recompute") and not r.get("recompute_last")
                       and abs(r.get("recompute_attention", 0) - att) < 1e-9), key=lambda r: r["k"])

    for mode, w, att, color, ls in series:
        label = mode if w is None else "inject w=%d" % w + (" + %d%% recomputed (attention)" % round(100 * att) if att else "")
        rows = pick(f1, mode, w, att)
        if rows:
            x = [r["k"] for r in rows]
            y = [r["f1"] for r in rows]
            lo = [r["f1"] - r["f1_ci95"][0] for r in rows]
            hi = [r["f1_ci95"][1] - r["f1"] for r in rows]
            a.errorbar(x, y, yerr=[lo, hi], color=color, ls=ls, marker="o", capsize=3, label=label)
        rk = pick(kl["configs"], mode, w, att) if mode == "inject" else []
        if rk:
            b.plot([r["k"] for r in rk], [r["kl_per_token"] for r in rk], color=color, ls=ls, marker="o", label=label)
    n_f1 = f1[0]["questions"] if f1 else 0
    a.set(xscale="log", xticks=ks, xticklabels=[str(k) for k in ks], xlabel="facts per question (k)",
          ylabel="LoCoMo token F1", title="F1 (%d questions, 95%% bootstrap)" % n_f1)
    b.set(xscale="log", xticks=ks, xticklabels=[str(k) for k in ks], xlabel="facts per question (k)",
          ylabel="KL(text || inject) per answer token",
          title="KL, teacher-forced gold answers\n(%s, %d questions)" % (
              "all 10 conversations" if kl.get("convs") == "all" else kl.get("convs", ""),
              next((r["questions"] for r in kl["configs"] if r["mode"] == "inject"), 0)))
    for ax in (a, b):
        ax.minorticks_off()
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
