#!/usr/bin/env python3
"""Writes the golden model fixtures under tests/fixtures/ (format: tests/fixtures/models/README.md).

For each tiny random HF model: config.json, model.safetensors (or two shards + index), golden.json
holding float64 logits computed by HF transformers. Also tests/fixtures/rope/golden.json: the rope
inverse frequencies and attention factor that transformers' rope init functions give.

Run with the project's venv (torch 2.x, transformers 5.x, safetensors):
    /work/venv/bin/python scripts/make_model_fixtures.py [--out tests/fixtures] [--only NAME] [--no-verify]

Float64, end to end. transformers computes in float32 in three places even when the model is float64:
the rope inverse frequencies (`dtype=torch.float`), RMSNorm (`.to(torch.float32)`) and the eager
softmax (`dtype=torch.float32`), and its rotary forward multiplies position x inv_freq in float32
(`.float()`), which alone moves a position-9,000 angle by ~5e-4. So while transformers code runs we
alias the names torch.float / torch.float32 to float64 (`float64_torch()`), and we replace the rotary
module's forward with a float64 one. A separate plain-numpy float64 forward written here (own rope
formulas, own attention) checks every stored logit (`verify_*`), so a float32 leak would show.
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import types

import numpy as np
import torch
import transformers

FORMAT = "inferscale-golden-v1"


# ------------------------------------------------------------------------------------------------
# float64 helpers

@contextlib.contextmanager
def float64_torch():
    """Within the block, code that names torch.float / torch.float32 gets float64 instead."""
    saved = (torch.float, torch.float32)
    torch.float = torch.float64
    torch.float32 = torch.float64
    try:
        yield
    finally:
        torch.float, torch.float32 = saved


def rotary_forward_f64(self, x, position_ids):
    """Drop-in for <Model>RotaryEmbedding.forward: angles = position x inv_freq in float64."""
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(device=x.device, dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rope_module_class(model):
    return type(model.model.rotary_emb)


def rope_init_f64(config, rotary_cls):
    """(inv_freq float64, attention_factor) from transformers' own init functions, evaluated in float64."""
    with float64_torch():
        rot = rotary_cls(config=config)
    assert rot.inv_freq.dtype == torch.float64, rot.inv_freq.dtype
    return rot.inv_freq.clone(), float(rot.attention_scaling)


def rope_init_f32(config, rotary_cls):
    rot = rotary_cls(config=config)
    return rot.inv_freq.clone(), float(rot.attention_scaling)


def make_model_f64(model):
    """Casts to float64 and rebuilds the rotary frequencies in float64 (see the module docstring)."""
    model = model.to(torch.float64)
    rot = model.model.rotary_emb
    inv_freq, attention_scaling = rope_init_f64(model.config, type(rot))
    rot.inv_freq = inv_freq
    rot.original_inv_freq = inv_freq.clone()
    rot.attention_scaling = attention_scaling
    rot.forward = types.MethodType(rotary_forward_f64, rot)
    return model


# ------------------------------------------------------------------------------------------------
# Fixture definitions

def base_kwargs(**over):
    kw = dict(vocab_size=300, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, tie_word_embeddings=False)
    kw.update(over)
    return kw


FIXTURES = {
    # Llama 3.1-style llama3 rope scaling with a small original context, so the long prompt covers
    # all three frequency regimes and positions past 8,192. Config written in the transformers 4.x
    # layout (rope_theta at the top, rope_scaling with "rope_type"), like the real Llama-3.1 files.
    "llama3_scaled": dict(
        cls="LlamaForCausalLM", config_cls="LlamaConfig", storage="float32", prompt_len=8300,
        positions=[0, 1, 2, 100, 1023, 1024, 1025, 4096, 8191, 8192, 8193, 8250, 8299],
        layout="v4", rope_key="rope_type",
        kwargs=base_kwargs(max_position_embeddings=16384, rope_theta=500000.0,
                           rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                             high_freq_factor=4.0, original_max_position_embeddings=1024),
                           eos_token_id=[2, 3])),
    # Qwen2: q/k/v biases (implied by the architecture), tied embeddings (no lm_head.weight in the
    # file), two safetensors shards. Config in the transformers 5.x layout (rope_parameters).
    "qwen2_bias_tied": dict(
        cls="Qwen2ForCausalLM", config_cls="Qwen2Config", storage="float32", prompt_len=40,
        positions=[0, 1, 2, 15, 16, 17, 39], layout="v5", shards=2,
        kwargs=base_kwargs(max_position_embeddings=4096, rope_theta=1000000.0, tie_word_embeddings=True,
                           bos_token_id=None, eos_token_id=2, rms_norm_eps=1e-6)),
    # Qwen3: q/k RMSNorm over each head, explicit head_dim (32) != hidden / heads (16), f16 storage.
    "qwen3_qknorm": dict(
        cls="Qwen3ForCausalLM", config_cls="Qwen3Config", storage="float16", prompt_len=40,
        positions=[0, 1, 2, 15, 16, 17, 39], layout="v5",
        kwargs=base_kwargs(head_dim=32, max_position_embeddings=4096, rope_theta=1000000.0,
                           rms_norm_eps=1e-6)),
    # Mistral v0.3 shape: no sliding window (null), bf16 storage, transformers 4.x config layout.
    "mistral": dict(
        cls="MistralForCausalLM", config_cls="MistralConfig", storage="bfloat16", prompt_len=40,
        positions=[0, 1, 2, 15, 16, 17, 39], layout="v4",
        kwargs=base_kwargs(max_position_embeddings=4096, rope_theta=1000000.0, sliding_window=None)),
    # YaRN rope (old "type" key), prompt past original_max_position_embeddings.
    "llama_yarn": dict(
        cls="LlamaForCausalLM", config_cls="LlamaConfig", storage="float32", prompt_len=1100,
        positions=[0, 1, 255, 256, 511, 512, 513, 1099], layout="v4", rope_key="type",
        kwargs=base_kwargs(max_position_embeddings=2048, rope_theta=10000.0,
                           rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=512))),
}

DECODE_STEPS = 5
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def init_weights(model, seed):
    """Deterministic weights at a scale where logits differ clearly (HF's 0.02 init makes them flat)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.15 * noise)


def rewrite_config_v4(path, rope_key):
    """transformers 5.x writes rope_parameters; rewrite to the 4.x layout most checkpoints carry."""
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    rtype = rp.pop("rope_type", "default")
    if rtype == "default":
        cfg["rope_scaling"] = None
    else:
        cfg["rope_scaling"] = {rope_key: rtype, **rp}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@torch.no_grad()
def golden_forward(model, prompt, positions, chunk=512):
    """Chunked prefill with a KV cache (eager attention; a chunk's scores stay small), then greedy decode."""
    cache = transformers.DynamicCache(config=model.config)
    rows = {}
    want = set(positions)
    last = None
    with float64_torch():
        for start in range(0, len(prompt), chunk):
            ids = torch.tensor([prompt[start:start + chunk]])
            pos = torch.arange(start, start + ids.shape[1])[None]
            out = model(input_ids=ids, position_ids=pos, cache=cache, use_cache=True)
            logits = out.logits[0]
            for j in range(ids.shape[1]):
                if start + j in want:
                    rows[start + j] = logits[j].clone()
            last = logits[-1].clone()
        decode = []
        for step in range(DECODE_STEPS):
            tok = int(torch.argmax(last))
            p = len(prompt) + step
            out = model(input_ids=torch.tensor([[tok]]), position_ids=torch.tensor([[p]]), cache=cache, use_cache=True)
            last = out.logits[0, -1].clone()
            decode.append({"token": tok, "position": p, "logits": last})
    assert all(r.dtype == torch.float64 for r in rows.values())
    return [rows[p] for p in positions], decode


# ------------------------------------------------------------------------------------------------
# Independent numpy float64 reference (used only to verify the golden).

def np_inv_freq(cfg):
    """Own implementation of the rope formulas (default / linear / llama3 / yarn) in float64."""
    rp = dict(cfg.rope_parameters)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    base = rp["rope_theta"]
    inv = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = rp.get("rope_type", "default")
    att = 1.0
    if kind == "linear":
        inv = inv / rp["factor"]
    elif kind == "llama3":
        f, lo, hi, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        out = []
        for w, x in zip(wl, inv):
            if w < old / hi:
                out.append(x)
            elif w > old / lo:
                out.append(x / f)
            else:
                s = (old / w - lo) / (hi - lo)
                out.append((1 - s) * x / f + s * x)
        inv = np.array(out)
    elif kind == "yarn":
        f = rp["factor"]
        old = rp["original_max_position_embeddings"]

        def mscale(scale, m=1.0):
            return 0.1 * m * math.log(scale) + 1.0 if scale > 1 else 1.0

        if rp.get("attention_factor") is not None:
            att = rp["attention_factor"]
        elif rp.get("mscale") and rp.get("mscale_all_dim"):
            att = mscale(f, rp["mscale"]) / mscale(f, rp["mscale_all_dim"])
        else:
            att = mscale(f)

        def cdim(rot):
            return head_dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = cdim(rp.get("beta_fast") or 32), cdim(rp.get("beta_slow") or 1)
        if rp.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, head_dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extrap = 1 - ramp
        inv = (inv / f) * (1 - extrap) + inv * extrap
    else:
        assert kind == "default", kind
    return inv, att


def np_forward(cfg, w, tokens, arch, query_rows=None):
    """Logits [len(query_rows), vocab] of a full causal forward over `tokens` (positions 0..n-1)."""
    n = len(tokens)
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
    eps = cfg.rms_norm_eps
    inv, att = np_inv_freq(cfg)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]        # [n, hd/2]
    cos, sin = np.cos(ang) * att, np.sin(ang) * att

    def rms(x, g):
        return g * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    def rope(x):                                                          # x: [n, heads, hd], halves
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)

    x = w["model.embed_tokens.weight"][tokens]                            # [n, hidden]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if arch == "Qwen2ForCausalLM":
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        q, k, v = q.reshape(n, nh, hd), k.reshape(n, nkv, hd), v.reshape(n, nkv, hd)
        if arch == "Qwen3ForCausalLM":
            q = rms(q, w[p + "self_attn.q_norm.weight"])
            k = rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        out = np.zeros((n, nh, hd))
        group = nh // nkv
        for hh in range(nh):
            kk, vv = k[:, hh // group, :], v[:, hh // group, :]
            for s0 in range(0, n, 1024):
                s1 = min(n, s0 + 1024)
                sc = (q[s0:s1, hh, :] @ kk[:s1].T) / math.sqrt(hd)        # [chunk, s1]
                mask = np.arange(s1)[None, :] > np.arange(s0, s1)[:, None]
                sc[mask] = -np.inf
                sc = np.exp(sc - sc.max(axis=1, keepdims=True))
                sc /= sc.sum(axis=1, keepdims=True)
                out[s0:s1, hh, :] = sc @ vv[:s1]
        x = x + out.reshape(n, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "mlp.down_proj.weight"].T
    rows = query_rows if query_rows is not None else list(range(n))
    hfin = rms(x[rows], w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return hfin @ head.T


def load_torch_weights_f64(model):
    return {k: v.detach().to(torch.float64).numpy() for k, v in model.state_dict().items()}


def verify(name, cfg, arch, model_f64, golden):
    w = load_torch_weights_f64(model_f64)
    if cfg.tie_word_embeddings:
        w.pop("lm_head.weight", None)
    prompt = golden["prompt_token_ids"]
    ref = np_forward(cfg, w, prompt, arch, golden["positions"])
    err = np.max(np.abs(ref - np.array(golden["logits"]))) / np.max(np.abs(ref))
    tokens = prompt + [d["token"] for d in golden["decode"]]
    rows = [d["position"] for d in golden["decode"]]
    ref_d = np_forward(cfg, w, tokens, arch, rows)
    err_d = np.max(np.abs(ref_d - np.array([d["logits"] for d in golden["decode"]]))) / np.max(np.abs(ref_d))
    print(f"  verify {name}: max rel err vs numpy float64 reference: prompt {err:.2e}, decode {err_d:.2e}")
    assert err < 1e-10 and err_d < 1e-10, "golden disagrees with the numpy reference"


# ------------------------------------------------------------------------------------------------

def make_fixture(name, spec, out_root, do_verify):
    d = os.path.join(out_root, "models", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    config_cls = getattr(transformers, spec["config_cls"])
    model_cls = getattr(transformers, spec["cls"])
    cfg = config_cls(**spec["kwargs"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).to(torch.float32).eval()
    init_weights(model, seed=sum(map(ord, name)))
    model = model.to(TORCH_DTYPES[spec["storage"]])
    save_kw = {}
    if spec.get("shards"):
        total = sum(p.numel() * p.element_size() for p in model.parameters())
        save_kw["max_shard_size"] = int(total * 0.6)
    model.save_pretrained(d, **save_kw)
    if spec["layout"] == "v4":
        rewrite_config_v4(os.path.join(d, "config.json"), spec.get("rope_key", "rope_type"))
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    shard_files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    if spec.get("shards"):
        assert len(shard_files) == spec["shards"], shard_files
        assert os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    else:
        assert shard_files == ["model.safetensors"], shard_files

    # The golden comes from the files as transformers reads them back.
    loaded = model_cls.from_pretrained(d, attn_implementation="eager", dtype=TORCH_DTYPES[spec["storage"]]).eval()
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    lcfg = loaded.config
    def rope_params(c):  # the old "type" key stays beside "rope_type" after loading; same meaning
        return {k: v for k, v in c.rope_parameters.items() if k != "type"}
    assert rope_params(lcfg) == rope_params(cfg), (lcfg.rope_parameters, cfg.rope_parameters)
    model64 = make_model_f64(loaded)

    gen = torch.Generator().manual_seed(1234 + len(name))
    prompt = torch.randint(0, cfg.vocab_size, (spec["prompt_len"],), generator=gen).tolist()
    positions = spec["positions"]
    assert positions[-1] == len(prompt) - 1
    rows, decode = golden_forward(model64, prompt, positions)
    golden = {
        "format": FORMAT,
        "name": name,
        "architecture": spec["cls"],
        "storage_dtype": spec["storage"],
        "files": shard_files,
        "compute": "float64: stored weights upcast exactly; rope inv_freq, angles, RMSNorm and softmax in float64",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "vocab_size": cfg.vocab_size,
        "prompt_token_ids": prompt,
        "positions": positions,
        "logits": [r.tolist() for r in rows],
        "decode": [{"token": s["token"], "position": s["position"], "logits": s["logits"].tolist()} for s in decode],
    }
    if do_verify:
        verify(name, lcfg, spec["cls"], model64, golden)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"  {name}: {len(os.listdir(d))} files, {size / 1024:.0f} KiB")
    assert size < 1024 * 1024, f"{name} is over 1 MiB"


# ------------------------------------------------------------------------------------------------
# Rope golden: inv_freq and attention_factor from transformers for a set of configs.

ROPE_CASES = [
    ("default_llama", "LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, rope_theta=10000.0,
                                           max_position_embeddings=4096)),
    ("llama3_8b", "LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, rope_theta=500000.0,
                                       max_position_embeddings=131072,
                                       rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                         high_freq_factor=4.0, original_max_position_embeddings=8192))),
    ("llama3_32_tiny", "LlamaConfig", dict(hidden_size=64, num_attention_heads=4, rope_theta=500000.0,
                                            max_position_embeddings=16384,
                                            rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=2.0,
                                                              high_freq_factor=8.0, original_max_position_embeddings=1024))),
    ("linear_4", "LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, rope_theta=10000.0,
                                      max_position_embeddings=16384, rope_scaling=dict(type="linear", factor=4.0))),
    ("yarn_qwen", "Qwen2Config", dict(hidden_size=3584, num_attention_heads=28, rope_theta=1000000.0,
                                       max_position_embeddings=131072,
                                       rope_scaling=dict(type="yarn", factor=4.0, original_max_position_embeddings=32768))),
    ("yarn_mscale", "LlamaConfig", dict(hidden_size=2048, num_attention_heads=16, rope_theta=10000.0,
                                         max_position_embeddings=163840,
                                         rope_scaling=dict(rope_type="yarn", factor=40.0, mscale=0.707,
                                                           mscale_all_dim=1.0, beta_fast=16, beta_slow=2,
                                                           original_max_position_embeddings=4096))),
    ("yarn_attention_factor_no_truncate", "LlamaConfig",
     dict(hidden_size=1024, num_attention_heads=8, rope_theta=50000.0, max_position_embeddings=65536,
          rope_scaling=dict(rope_type="yarn", factor=8.0, attention_factor=1.25, truncate=False,
                            original_max_position_embeddings=8192))),
    ("yarn_no_original", "LlamaConfig", dict(hidden_size=1024, num_attention_heads=8, rope_theta=10000.0,
                                              max_position_embeddings=8192,
                                              rope_scaling=dict(rope_type="yarn", factor=2.0))),
    ("default_head_dim_qwen3", "Qwen3Config", dict(hidden_size=1024, num_attention_heads=16, head_dim=128,
                                                    rope_theta=1000000.0, max_position_embeddings=40960)),
]
ROPE_POSITIONS = [0, 1, 7, 4095, 8191, 8192, 8193, 100000, 131071]
ARCH_OF = {"LlamaConfig": "LlamaForCausalLM", "Qwen2Config": "Qwen2ForCausalLM", "Qwen3Config": "Qwen3ForCausalLM"}
ROTARY_OF = {"LlamaConfig": "llama", "Qwen2Config": "qwen2", "Qwen3Config": "qwen3"}


def make_rope_golden(out_root):
    import importlib
    cases = []
    for name, cls_name, kw in ROPE_CASES:
        kw = dict(kw, vocab_size=1000, intermediate_size=128, num_hidden_layers=1)
        cfg = getattr(transformers, cls_name)(**kw)
        module = ROTARY_OF[cls_name]
        mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
        rot_cls = next(getattr(mod, n) for n in dir(mod) if n.endswith("RotaryEmbedding"))
        inv64, att64 = rope_init_f64(cfg, rot_cls)
        inv32, att32 = rope_init_f32(cfg, rot_cls)
        rel = float(torch.max(torch.abs(inv64 - inv32.double()) / inv64))
        assert rel < 1e-6, (name, rel)
        ref, ref_att = np_inv_freq(cfg)
        assert np.allclose(ref, inv64.numpy(), rtol=1e-12, atol=0), (name, ref, inv64)
        assert abs(ref_att - att64) < 1e-12, (name, ref_att, att64)
        config_json = {"architectures": [ARCH_OF[cls_name]], **kw}
        pos = torch.tensor(ROPE_POSITIONS, dtype=torch.float64)[:, None]
        ang = pos * inv64[None, :]
        cases.append({
            "name": name,
            "config": config_json,
            "inv_freq": inv64.tolist(),
            "inv_freq_float32": inv32.double().tolist(),
            "attention_factor": att64,
            "positions": ROPE_POSITIONS,
            "cos": (ang.cos() * att64).tolist(),
            "sin": (ang.sin() * att64).tolist(),
        })
    d = os.path.join(out_root, "rope")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump({"format": "inferscale-rope-golden-v1", "transformers_version": transformers.__version__,
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"  rope: {len(cases)} cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
    ap.add_argument("--only", action="append", help="fixture name (repeatable); 'rope' for the rope golden")
    ap.add_argument("--no-verify", action="store_true", help="skip the numpy float64 cross-check")
    args = ap.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    names = args.only or ["rope", *FIXTURES]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for n in names:
        if n == "rope":
            make_rope_golden(args.out)
        elif n in FIXTURES:
            make_fixture(n, FIXTURES[n], args.out, not args.no_verify)
        else:
            sys.exit(f"unknown fixture {n!r}; known: rope, {', '.join(FIXTURES)}")


if __name__ == "__main__":
    main()
