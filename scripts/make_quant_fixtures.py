#!/usr/bin/env python3
"""Writes the block-quantization fixtures under tests/fixtures/quant/ (format: its README.md).

1. Per type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): `<type>.blocks`, random raw
   blocks, and `<type>.f32`, the values `gguf.quants.dequantize` (the reference of the `gguf` PyPI
   package) gives for them. The f16 scale/min fields of the first blocks walk through the extreme
   values (+-0, the smallest and largest subnormals, the smallest normal, +-65504, +-1); the rest
   are random finite halves. The quant bytes are random, with one all-0x00 and one all-0xFF block.
2. `tiny_quant.gguf`: a 2-layer llama (hidden 32, 8 heads x 32 = q size 256, 1 kv head, FFN 32,
   a 64-token SPM vocabulary) with a Q8_0 token_embd.weight and no output.weight (so it is also the
   tied output head), layer matrices in Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 and attn_output in Q4_K (layer 0)
   and Q6_K (layer 1) (their rows of 256 values are the only ones a K-quant fits), F32 norms.
   `tiny_quant_f32.gguf`: the same model with every tensor replaced by its gguf.quants
   dequantization, stored as F32.
3. With --smollm PATH (default models/SmolLM2-135M-Instruct.Q4_1.gguf, skipped when absent):
   `smollm2_rows.json` + `smollm2_rows.f32`, a few dequantized rows of its Q8_0 token_embd.weight
   and of a Q4_1 tensor.

Run with the project's venv (numpy, gguf):
    /work/main/.venv/bin/python scripts/make_quant_fixtures.py [--out tests/fixtures/quant]
"""
import argparse
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]

# Byte offsets of the f16 scale (d) and min (m / dmin) fields inside one block.
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}

# +0, -0, smallest / largest subnormal (both signs), smallest normal, +-65504 (largest finite), +-1, ~1/3.
EXTREME_F16 = [0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x3555]

BLOCKS = {32: 96, 256: 16}  # blocks per fixture by block size: 3,072 / 4,096 values


def random_finite_f16(rng):
    while True:
        h = int(rng.integers(0, 1 << 16))
        if (h >> 10) & 0x1F != 0x1F:  # not inf / NaN
            return h


def put_f16(block, offset, h):
    block[offset] = h & 0xFF
    block[offset + 1] = h >> 8


def random_blocks(name, rng):
    qt = QT[name]
    block_size, type_size = gguf.GGML_QUANT_SIZES[qt]
    n = BLOCKS[block_size]
    raw = rng.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    fields = F16_FIELDS[name]
    # Every quant byte 0x00 in block 1 and 0xFF in block 2 (scales still extreme / random).
    keep = np.zeros(type_size, dtype=bool)
    for off in fields:
        keep[off:off + 2] = True
    raw[1, ~keep] = 0x00
    raw[2, ~keep] = 0xFF
    for b in range(n):
        for k, off in enumerate(fields):
            if b < 2 * len(EXTREME_F16):
                h = EXTREME_F16[(b + 5 * k) % len(EXTREME_F16)]  # d and m take different extremes
            else:
                h = random_finite_f16(rng)
            put_f16(raw[b], off, h)
    return qt, raw


def write_type_fixtures(out, rng):
    manifest = {}
    for name in TYPES:
        qt, raw = random_blocks(name, rng)
        expected = dequantize(raw.reshape(1, -1), qt).astype(np.float32).reshape(-1)
        assert np.isfinite(expected).all(), name
        raw.tofile(os.path.join(out, name.lower() + ".blocks"))
        expected.astype("<f4").tofile(os.path.join(out, name.lower() + ".f32"))
        block_size, type_size = gguf.GGML_QUANT_SIZES[qt]
        manifest[name] = {"blocks": int(raw.shape[0]), "block_values": block_size, "block_bytes": type_size,
                          "max_abs": float(np.abs(expected).max())}
        print(f"{name}: {raw.shape[0]} blocks, {raw.nbytes} B raw, max |y| {np.abs(expected).max():.4g}")
    return manifest


# ------------------------------------------------------------------------------------------------
# The tiny quantized model

HIDDEN, HEADS, HEAD_DIM, KV_HEADS, FFN, LAYERS, VOCAB = 32, 8, 32, 1, 32, 2, 64


def vocab():
    tokens = ["<unk>", "<s>", "</s>", "\u2581"]
    tokens += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += ["\u2581the", "\u2581and", "\u2581is", "\u2581of", ".", ",", "!", "?"][: VOCAB - len(tokens)]
    assert len(tokens) == VOCAB, len(tokens)
    scores = [0.0, 0.0, 0.0] + [-float(i) for i in range(VOCAB - 3)]
    types = [2, 3, 3] + [1] * (VOCAB - 3)  # unknown, control, control, normal
    return tokens, scores, types


def k_quant_blocks(qt, rows, cols, rng):
    """Random K-quant blocks with small d / dmin (gguf.quants cannot quantize K-quants)."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qt]
    n = rows * cols // block_size
    raw = rng.integers(0, 256, size=(n, type_size), dtype=np.uint8)
    name = qt.name
    scale = {"Q4_K": 3e-4, "Q6_K": 7e-5}[name]
    for b in range(n):
        for k, off in enumerate(F16_FIELDS[name]):
            v = np.float16(scale * (0.5 + rng.random()))
            put_f16(raw[b], off, int(v.view(np.uint16)))
    return raw.reshape(rows, cols // block_size * type_size)


def tiny_model_tensors(rng):
    """(name, raw array, ggml type) in file order; raw is float32 for F32 and uint8 blocks otherwise."""
    qs = HEADS * HEAD_DIM
    kv = KV_HEADS * HEAD_DIM
    out = []

    def dense(name, rows, cols, qt, std=0.15):
        x = rng.normal(0, std, size=(rows, cols)).astype(np.float32)
        out.append((name, quantize(x, qt), qt))

    def norm(name):
        out.append((name, (1 + rng.normal(0, 0.1, size=HIDDEN)).astype(np.float32), QT.F32))

    dense("token_embd.weight", VOCAB, HIDDEN, QT.Q8_0, std=0.5)
    norm("output_norm.weight")
    layer_types = [
        {"attn_q": QT.Q4_1, "attn_k": QT.Q4_0, "attn_v": QT.Q5_0, "attn_output": QT.Q4_K,
         "ffn_gate": QT.Q4_1, "ffn_up": QT.Q5_1, "ffn_down": QT.Q8_0},
        {"attn_q": QT.Q8_0, "attn_k": QT.Q4_1, "attn_v": QT.Q4_1, "attn_output": QT.Q6_K,
         "ffn_gate": QT.Q4_1, "ffn_up": QT.Q4_1, "ffn_down": QT.Q4_1},
    ]
    shapes = {"attn_q": (qs, HIDDEN), "attn_k": (kv, HIDDEN), "attn_v": (kv, HIDDEN), "attn_output": (HIDDEN, qs),
              "ffn_gate": (FFN, HIDDEN), "ffn_up": (FFN, HIDDEN), "ffn_down": (HIDDEN, FFN)}
    for i, types in enumerate(layer_types):
        norm(f"blk.{i}.attn_norm.weight")
        norm(f"blk.{i}.ffn_norm.weight")
        for role, qt in types.items():
            rows, cols = shapes[role]
            if qt in (QT.Q4_K, QT.Q6_K):
                out.append((f"blk.{i}.{role}.weight", k_quant_blocks(qt, rows, cols, rng), qt))
            else:
                dense(f"blk.{i}.{role}.weight", rows, cols, qt)
    return out


def write_tiny_model(path, tensors):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-quant")
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    tokens, scores, types = vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for name, data, qt in tensors:
        if qt == QT.F32:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tiny_models(out, rng):
    tensors = tiny_model_tensors(rng)
    write_tiny_model(os.path.join(out, "tiny_quant.gguf"), tensors)
    f32 = [(n, d if qt == QT.F32 else dequantize(d, qt).astype(np.float32), QT.F32) for n, d, qt in tensors]
    for n, d, _ in f32:
        assert np.isfinite(d).all(), n
    write_tiny_model(os.path.join(out, "tiny_quant_f32.gguf"), f32)
    kinds = {}
    for _, _, qt in tensors:
        kinds[qt.name] = kinds.get(qt.name, 0) + 1
    print("tiny_quant.gguf tensors by type:", kinds)
    return kinds


# ------------------------------------------------------------------------------------------------
# Rows of the real SmolLM2 file

SMOLLM_ROWS = {"token_embd.weight": [0, 1, 2, 1234, 49151], "blk.0.ffn_down.weight": [0, 287, 575],
               "blk.29.attn_k.weight": [0, 191]}


def write_smollm_rows(out, path):
    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    entries, values = [], []
    for name, rows in SMOLLM_ROWS.items():
        t = by_name[name]
        full = dequantize(np.asarray(t.data), t.tensor_type)  # [rows, row values]
        entries.append({"tensor": name, "type": t.tensor_type.name, "shape": list(full.shape), "rows": rows})
        values.append(full[rows].astype(np.float32).reshape(-1))
    np.concatenate(values).astype("<f4").tofile(os.path.join(out, "smollm2_rows.f32"))
    doc = {"model": os.path.basename(path), "file_size": os.path.getsize(path), "tensors": entries,
           "values": "smollm2_rows.f32: the rows of each tensor in order, float32 little-endian"}
    with open(os.path.join(out, "smollm2_rows.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("smollm2 rows:", {e["tensor"]: e["type"] for e in entries})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/quant")
    ap.add_argument("--smollm", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(20240607)
    manifest = {"format": "inferscale-quant-v1", "gguf_version": gguf.__version__ if hasattr(gguf, "__version__") else
                None, "types": write_type_fixtures(a.out, rng), "tiny_model_types": write_tiny_models(a.out, rng)}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    if os.path.exists(a.smollm):
        write_smollm_rows(a.out, a.smollm)
    else:
        print(f"{a.smollm} absent: smollm2_rows.* not written")


if __name__ == "__main__":
    main()
