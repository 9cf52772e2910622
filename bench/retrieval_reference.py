#!/usr/bin/env python3
"""An independent reference for bench_retrieval_locomo: the same LoCoMo evidence-recall table from
our own Python BM25 (no rank_bm25) and sentence-transformers dense retrieval, fused by the same RRF.

    /work/main/.venv/bin/python bench/retrieval_reference.py --locomo ../shared/data/locomo/locomo10.json \
        --model models/all-MiniLM-L6-v2 --json ref.json --md ref.md [--convs conv-26] [--threads 2]

What is shared with the C++ benchmark, so the numbers compare: the questions (categories 1-4 with
at least one well-formed evidence dia_id, the same parsing as src/memory/formats/locomo.cpp), the facts (the
non-blank turn texts), "found at k" (any evidence turn in the top k), Okapi BM25 with k1 = 1.2,
b = 0.75 and idf = ln(1 + (N - df + 0.5) / (df + 0.5)), RRF with k_rrf = 60 over each retriever's
top max(k, 100), and ties broken by turn order. What is not: BM25's tokens here are Python's
\\w+ runs of the lowercased text (the C++ side splits at every non-alphanumeric ASCII byte), and
the dense vectors come from sentence-transformers (PyTorch, float32, mean pooling, L2-normalized,
max_seq_length 256) instead of our encoder. Both embed a turn as "[date] speaker: text"; BM25
indexes "speaker text date" (bm25_document's fields; ours also stems and drops stop words), and
neighbour expansion (--neighbours, 0.5 as the server's default) is NeighbourRetriever's rule:
over BM25's top max(k, 100), score'(f) = score(f) + w * the best score of f's neighbours (the
turns beside it in its session) among them. Latency is one query's embedding (each question is
embedded once, timed, and that time is added to the dense and hybrid searches) plus the search;
throughput embeds every turn in batches of 32.
"""
import argparse
import json
import math
import os
import re
import time
from collections import Counter, defaultdict

import numpy as np

K1, B = 1.2, 0.75
K_RRF, DEPTH = 60.0, 100
EVIDENCE = re.compile(r"(?<![A-Za-z0-9])D:?(\d+):(\d+)")
WORD = re.compile(r"\w+")


def load(path, only):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    convs, left_out = [], {"adversarial": 0, "no_evidence": 0}
    for sample in data:
        if only and sample["sample_id"] not in only:
            continue
        c = sample["conversation"]
        keys = sorted((k for k in c if re.fullmatch(r"session_\d+", k) and isinstance(c[k], list)),
                      key=lambda k: int(k.split("_")[1]))
        # (dia_id, BM25's document "speaker text date", the document the dense side embeds:
        # "[date] speaker: text", as memory/retrieval/vector_retriever.h's embedding_document
        # renders a LoCoMo turn)
        turns = [(t["dia_id"], f"{t.get('speaker', '')} {t['text']} {c.get(k + '_date_time', '')}",
                  f"[{c.get(k + '_date_time', '')}] {t.get('speaker', '')}: {t['text']}")
                 for k in keys for t in c[k] if t.get("text", "").strip(" \t\r\n")]
        qs = []
        for qa in sample["qa"]:
            if qa["category"] == 5:
                left_out["adversarial"] += 1
                continue
            ev = set()
            for entry in qa.get("evidence", []):
                ev.update(f"D{s}:{t}" for s, t in EVIDENCE.findall(entry))
            if not ev:
                left_out["no_evidence"] += 1
                continue
            qs.append((qa["question"], qa["category"], ev))
        convs.append((sample["sample_id"], turns, qs))
    return convs, left_out


class Bm25:
    def __init__(self, texts):
        self.docs = [Counter(WORD.findall(t.lower())) for t in texts]
        self.len = np.array([sum(d.values()) for d in self.docs], dtype=np.float64)
        self.avgdl = self.len.mean()
        self.df = Counter(w for d in self.docs for w in d)
        self.n = len(texts)
        self.postings = defaultdict(list)
        for i, d in enumerate(self.docs):
            for w, tf in d.items():
                self.postings[w].append((i, tf))

    def scored(self, query, k):
        scores = defaultdict(float)
        for w in WORD.findall(query.lower()):  # repeated query words count again, as rank_bm25 sums
            if w not in self.df:
                continue
            idf = math.log(1 + (self.n - self.df[w] + 0.5) / (self.df[w] + 0.5))
            for i, tf in self.postings[w]:
                scores[i] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * self.len[i] / self.avgdl))
        return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]

    def search(self, query, k):
        return [i for i, _ in self.scored(query, k)]


def neighbours_of(turns):
    """Turn index -> the indices of the turns beside it in its session (dia_id D<session>:<turn>)."""
    at = {}
    for i, (dia, _, _) in enumerate(turns):
        m = EVIDENCE.fullmatch(dia)
        if m:
            at[(int(m[1]), int(m[2]))] = i
    return {i: [at[(s, t + d)] for d in (-1, 1) if (s, t + d) in at] for (s, t), i in at.items()}


def bm25_search(bm25, near, query, k, w):
    """BM25 with neighbour expansion (NeighbourRetriever): score'(f) = score(f) + w * max score of
    f's neighbours among the top max(k, DEPTH); a neighbour outside them scores 0 of its own."""
    cand = bm25.scored(query, max(k, DEPTH))
    if w <= 0:
        return [i for i, _ in cand[:k]]
    own = dict(cand)
    lent = defaultdict(float)
    for i, s in cand:
        for n in near.get(i, ()):
            lent[n] = max(lent[n], s)
    final = {f: own.get(f, 0.0) + w * lent.get(f, 0.0) for f in set(own) | set(lent)}
    return sorted(final, key=lambda f: (-final[f], f))[:k]


def dense_search(vecs, q, k):
    s = vecs @ q
    order = np.lexsort((np.arange(len(s)), -s))  # score descending, then turn order
    return order[:k].tolist()


def rrf(rankings, k):
    fused = defaultdict(float)
    for r in rankings:
        for rank, i in enumerate(r, start=1):
            fused[i] += 1.0 / (K_RRF + rank)
    return [i for i, _ in sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:k]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--locomo", default="../shared/data/locomo/locomo10.json")
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    ap.add_argument("--retrieval", default="bm25,dense,hybrid")
    ap.add_argument("--convs", default="")
    ap.add_argument("--k", default="5,10,20,50")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--neighbours", type=float, default=0.5, help="neighbour expansion weight of BM25 (0: off)")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    modes = [m for m in a.retrieval.split(",") if m]
    ks = [int(k) for k in a.k.split(",")]
    max_k = max(ks)
    convs, left_out = load(a.locomo, set(c for c in a.convs.split(",") if c))
    n_turns = sum(len(t) for _, t, _ in convs)
    n_q = sum(len(q) for _, _, q in convs)
    out = {"implementation": "python reference (bench/retrieval_reference.py): own BM25, sentence-transformers",
           "reference": True, "locomo": a.locomo, "conversations": len(convs), "turns": n_turns, "questions": n_q,
           "left_out": left_out, "ks": ks, "hardware_threads": os.cpu_count(), "embedder": "", "modes": {}}

    model = None
    vecs = {}
    if any(m != "bm25" for m in modes):
        import torch
        from sentence_transformers import SentenceTransformer
        torch.set_num_threads(a.threads)
        model = SentenceTransformer(a.model, device="cpu")
        out["embedder"] = f"sentence-transformers {a.model} (max_seq_length {model.max_seq_length}, {a.threads} threads)"
        t0 = time.perf_counter()
        for cid, turns, _ in convs:
            vecs[cid] = model.encode([d for _, _, d in turns], batch_size=32, normalize_embeddings=True,
                                     convert_to_numpy=True)
        s = time.perf_counter() - t0
        out["embedding"] = {"turns": n_turns, "seconds": s, "turns_per_s": n_turns / s, "note": ""}
        print(f"embedded {n_turns} turns in {s:.2f} s ({n_turns / s:.1f} turns/s)")

    # Each question is embedded once, timed; dense and hybrid add that time to their own search.
    qvec, qsec = {}, {}
    if model is not None:
        for cid, _, qs in convs:
            for question, _, _ in qs:
                if question not in qvec:
                    t0 = time.perf_counter()
                    qvec[question] = model.encode(question, normalize_embeddings=True, convert_to_numpy=True)
                    qsec[question] = time.perf_counter() - t0
    bm25 = {cid: Bm25([t for _, t, _ in turns]) for cid, turns, _ in convs}
    near = {cid: neighbours_of(turns) for cid, turns, _ in convs}
    out["neighbours"] = a.neighbours
    for mode in modes:
        found = defaultdict(lambda: defaultdict(int))
        asked = defaultdict(int)
        lat = []
        for cid, turns, qs in convs:
            for question, cat, ev in qs:
                t0 = time.perf_counter()
                depth = max(max_k, DEPTH)
                if mode == "bm25":
                    hits = bm25_search(bm25[cid], near[cid], question, max_k, a.neighbours)
                elif mode == "dense":
                    hits = dense_search(vecs[cid], qvec[question], max_k)
                else:
                    lexical = bm25_search(bm25[cid], near[cid], question, depth, a.neighbours)
                    hits = rrf([lexical, dense_search(vecs[cid], qvec[question], depth)], max_k)
                lat.append((time.perf_counter() - t0 + qsec.get(question, 0.0)) * 1000)
                first = next((r for r, i in enumerate(hits) if turns[i][0] in ev), None)
                for c in (0, cat):
                    asked[c] += 1
                    for k in ks:
                        found[c][k] += first is not None and first < k
        recall = {}
        for c in sorted(asked):
            recall["all" if c == 0 else str(c)] = {"n": asked[c], **{f"recall@{k}": found[c][k] / asked[c] for k in ks}}
        lat_sorted = sorted(lat)
        out["modes"][mode] = {"retriever": f"reference:{mode}", "recall": recall,
                              "latency_ms": {"p50": float(np.percentile(lat_sorted, 50)),
                                             "p95": float(np.percentile(lat_sorted, 95)),
                                             "mean": float(np.mean(lat_sorted))}}
        print(f"{mode:7s} recall@10 {recall['all']['recall@10']:.3f}  p50 {out['modes'][mode]['latency_ms']['p50']:.3f} ms")

    names = {"all": "all (1-4)", "1": "1 multi-hop", "2": "2 temporal", "3": "3 open-domain", "4": "4 single-hop"}
    md = "| retrieval | category | n |" + "".join(f" R@{k} |" for k in ks) + "\n|---|---|---:|" + "---:|" * len(ks) + "\n"
    for mode, m in out["modes"].items():
        for c, r in m["recall"].items():
            md += f"| {mode} | {names.get(c, c)} | {r['n']} |" + "".join(f" {r[f'recall@{k}']:.3f} |" for k in ks) + "\n"
    md += "\n| retrieval | retriever | query p50 ms | p95 ms | mean ms |\n|---|---|---:|---:|---:|\n"
    for mode, m in out["modes"].items():
        l = m["latency_ms"]
        md += f"| {mode} | `{m['retriever']}` | {l['p50']:.3f} | {l['p95']:.3f} | {l['mean']:.3f} |\n"
    if "embedding" in out:
        e = out["embedding"]
        md += f"\nEmbedding: {e['turns']} turns in {e['seconds']:.2f} s = {e['turns_per_s']:.1f} turns/s ({a.threads} threads).\n"
    print(md)
    if a.md:
        open(a.md, "w").write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
