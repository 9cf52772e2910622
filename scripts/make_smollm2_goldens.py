#!/usr/bin/env python3
"""Writes the SmolLM2-135M-Instruct goldens under tests/fixtures/smollm2/.

Run with a Python that has torch, transformers (5.x) and gguf (scripts/setup.sh's .venv plus those):
    .venv/bin/python scripts/make_smollm2_goldens.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]

The reference is transformers loading the same GGUF (it dequantizes Q4_1/Q8_0 to float and undoes
llama.cpp's q/k row permutation), run in float64 on the CPU:
- goldens.json: for each of 3 chat conversations, the prompt text that apply_chat_template renders
  from the GGUF's own template, its ids, and the greedy continuation (48 new tokens, each the argmax
  of its step's logits, EOS not treated specially).
- logits.bin + the "logits" section of goldens.json: for conversation 0, the logits at the last prompt
  token and at the first 7 greedy decode steps (teacher-forced along the greedy ids), at a fixed subset
  of ids (every 16th id and each row's top 32), little-endian float32, row-major [rows, ids].
"""
import argparse
import json
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2")

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    [
        {"role": "user", "content": "My cat is called Miso."},
        {"role": "assistant", "content": "That is a lovely name for a cat!"},
        {"role": "user", "content": "Write a short poem about my cat, using her name."},
    ],
]
NEW_TOKENS = 48
DECODE_ROWS = 7
ID_STRIDE = 16
TOP = 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    d, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).double().eval()
    os.makedirs(OUT, exist_ok=True)

    convs = []
    for conv in CONVERSATIONS:
        text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        # Greedy by hand: the argmax of each step's logits, EOS not treated specially (as the C++ test's
        # ignore_eos). generate() with min_new_tokens/eos_token_id=None gave another token at a 0.14 margin.
        seq = list(ids)
        with torch.no_grad():
            past = None
            step = torch.tensor([ids])
            for _ in range(NEW_TOKENS):
                out = model(step, past_key_values=past, use_cache=True)
                past = out.past_key_values
                seq.append(int(out.logits[0, -1].argmax()))
                step = torch.tensor([[seq[-1]]])
        new = seq[len(ids):]
        convs.append({"messages": conv, "prompt": text, "prompt_ids": ids, "greedy_ids": new,
                      "greedy_text": tok.decode(new)})
        print(repr(text[-60:]), "->", repr(tok.decode(new)[:80]))

    # Logits of conversation 0 along its greedy path.
    c = convs[0]
    seq = c["prompt_ids"] + c["greedy_ids"][:DECODE_ROWS]
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0].numpy()  # [len, vocab] float64
    rows = logits[len(c["prompt_ids"]) - 1:len(c["prompt_ids"]) - 1 + DECODE_ROWS + 1]
    vocab = rows.shape[1]
    ids = set(range(0, vocab, ID_STRIDE))
    for r in rows:
        ids.update(np.argsort(-r)[:TOP].tolist())
    ids = sorted(ids)
    sub = rows[:, ids].astype("<f4")
    sub.tofile(os.path.join(OUT, "logits.bin"))
    meta = {
        "source": "transformers %s loading %s (float64, CPU)" % (__import__("transformers").__version__, name),
        "conversations": convs,
        "logits": {"conversation": 0, "rows": int(rows.shape[0]), "first_row_token": len(c["prompt_ids"]) - 1,
                   "ids": ids, "file": "logits.bin", "vocab": int(vocab)},
    }
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print("wrote", OUT, "ids per row:", len(ids))


if __name__ == "__main__":
    main()
