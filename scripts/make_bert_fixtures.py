#!/usr/bin/env python3
"""Writes the BERT fixtures of tests/test_bert.cpp (format below). Run with the project's venv:

    /work/main/.venv/bin/python scripts/make_bert_fixtures.py [--out tests/fixtures] [--model models/all-MiniLM-L6-v2]
        [--locomo ../shared/data/locomo/locomo10.json]

1. models/bert_tiny/: a tiny random BertModel (hidden 32, 2 layers, 4 heads, FFN 64, vocab 120,
   64 positions; f32 safetensors, ~90 KB) and golden.json: transformers' last_hidden_state in
   float64 (eager attention, torch.float/float32 aliased to float64 while it runs) for three
   sequences of different lengths run as one padded batch (so the padding mask is exercised), the
   rows of the real tokens only.
2. minilm/texts.json + minilm/embeddings.f32: 50 LoCoMo turns and 20 LoCoMo questions, their token
   ids, (sentence-transformers' own tokenization: the test feeds these ids, so it does not depend on a
   WordPiece tokenizer) and sentence-transformers' sentence embeddings of them (the model's own pipeline: BertModel
   -> Pooling from 1_Pooling/config.json -> Normalize), computed in float64 and stored as float32
   little-endian [70, 384] (rounding costs ~6e-8; the test asks cosine >= 0.99999).

The model itself is never written here: it stays in models/ (scripts/fetch_models.sh fetches it).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import float64_torch  # noqa: E402  (torch.float / float32 aliased to float64)

FORMAT = "inferscale-bert-golden-v1"


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


# ------------------------------------------------------------------------------------------------
# 1. tiny random BERT

def make_bert_tiny(out_dir):
    import transformers
    from safetensors.torch import save_file

    cfg = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                                  hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(1234)
    model = transformers.BertModel(cfg, add_pooling_layer=True).eval()
    with torch.no_grad():  # weights large enough that every layer matters
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embeddings" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    os.makedirs(out_dir, exist_ok=True)
    model.config.architectures = ["BertModel"]
    model.config.save_pretrained(out_dir)
    tensors = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    rng = np.random.default_rng(99)
    lengths = [17, 5, 40]
    seqs = [[int(x) for x in rng.integers(0, cfg.vocab_size, n)] for n in lengths]
    L = max(lengths)
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    m64 = transformers.BertModel.from_pretrained(out_dir, attn_implementation="eager").to(torch.float64).eval()
    with torch.no_grad(), float64_torch():
        hidden = m64(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
    assert hidden.dtype == torch.float64
    golden = {
        "format": FORMAT,
        "name": "bert_tiny",
        "architecture": "BertModel",
        "compute": "transformers BertModel, eager attention, float64, one padded batch (attention_mask)",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "sequences": seqs,
        "hidden": [hidden[i, : len(s)].tolist() for i, s in enumerate(seqs)],  # [seq][token][hidden]
    }
    write_json(os.path.join(out_dir, "golden.json"), golden)
    print(f"{out_dir}: config.json, model.safetensors, golden.json")


# ------------------------------------------------------------------------------------------------
# 2. sentence-transformers embeddings of LoCoMo turns and questions

def locomo_texts(path, n_turns=50, n_questions=20):
    data = json.load(open(path))
    turns, questions = [], []
    # Turns from every conversation in turn (varied speakers, lengths, images), questions of every category.
    per_conv = [[] for _ in data]
    for i, sample in enumerate(data):
        conv = sample["conversation"]
        sessions = sorted((int(k.split("_")[1]) for k in conv if k.startswith("session_") and k.count("_") == 1))
        for n in sessions:
            for t in conv[f"session_{n}"]:
                if t.get("text"):
                    per_conv[i].append(t["text"])
    k = 0
    while len(turns) < n_turns:
        for c in per_conv:
            if k * 37 < len(c) and len(turns) < n_turns:
                turns.append(c[k * 37])
        k += 1
    for sample in data:
        for qa in sample["qa"][::40]:
            if len(questions) < n_questions:
                questions.append(qa["question"])
    return turns, questions


def make_minilm_goldens(model_dir, locomo, out_dir):
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    turns, questions = locomo_texts(locomo)
    texts = turns + questions
    model = SentenceTransformer(model_dir, device="cpu").eval()
    ids = [model.tokenize([t])["input_ids"][0].tolist() for t in texts]
    m64 = SentenceTransformer(model_dir, device="cpu").eval()
    m64.to(torch.float64)
    with torch.no_grad(), float64_torch():
        features = m64.tokenize(texts)
        emb = m64(features)["sentence_embedding"]
    assert emb.dtype == torch.float64
    emb = emb.numpy()
    # The float32 pipeline, for the record: how far float32 itself is from float64.
    e32 = model.encode(texts, convert_to_numpy=True, normalize_embeddings=False)
    cos32 = (e32 * emb).sum(1) / np.linalg.norm(e32, axis=1) / np.linalg.norm(emb, axis=1)
    os.makedirs(out_dir, exist_ok=True)
    emb.astype("<f4").tofile(os.path.join(out_dir, "embeddings.f32"))
    write_json(os.path.join(out_dir, "texts.json"), {
        "format": FORMAT,
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "compute": "SentenceTransformer (Transformer -> Pooling mean -> Normalize) in float64, stored float32 [n, 384]",
        "sentence_transformers_version": sentence_transformers.__version__,
        "torch_version": torch.__version__,
        "max_seq_length": model.max_seq_length,
        "min_cosine_float32_vs_float64": float(cos32.min()),
        "num_turns": len(turns),
        "texts": texts,
        "ids": ids,
    })
    print(f"{out_dir}: texts.json, embeddings.f32 [{emb.shape[0]}, {emb.shape[1]}]; float32 pipeline min cosine vs float64 "
          f"{cos32.min():.9f}")


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--model", default=os.path.join(root, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--locomo", default=os.path.join(root, "..", "shared", "data", "locomo", "locomo10.json"))
    a = ap.parse_args()
    make_bert_tiny(os.path.join(a.out, "models", "bert_tiny"))
    if not os.path.isdir(a.model):
        sys.exit(f"{a.model} not found: run scripts/fetch_models.sh")
    make_minilm_goldens(a.model, a.locomo, os.path.join(a.out, "minilm"))


if __name__ == "__main__":
    main()
