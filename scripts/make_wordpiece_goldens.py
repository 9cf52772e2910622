#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/minilm_wordpiece_goldens.json: what HF `tokenizers` makes of
varied strings with all-MiniLM-L6-v2's tokenizer.json (a BERT WordPiece tokenizer).

    /work/main/.venv/bin/python scripts/make_wordpiece_goldens.py [--model models/all-MiniLM-L6-v2]
        [--locomo ../shared/data/locomo/locomo10.json]

Per case: `ids` (add_special_tokens=False), `ids_special` (add_special_tokens=True: [CLS] ... [SEP]),
`ids_plain` (encode_special_tokens=True: "[CLS]" written in the text is tokenized as text), `words`
(the normalizer then the pre-tokenizer, as strings), `ids_trunc` (truncation to 16 ids with the
specials, direction right) and `ids_trunc_left` (16, left). The padding and the truncation that
tokenizer.json configures (Fixed 128, max_length 128) are switched off for the other fields;
`file_truncation` records the file's own. `decode` holds decode(ids_special) both ways for the
cases whose first decoded token is not a "##" continuation (where our fold differs from HF, see
src/tokenizer/wordpiece.h). The strings: the shared tokenizer TEXTS of make_tokenizer_goldens.py,
BERT-specific ones (accents, CJK, Hangul, emoji, controls, Unicode whitespace and punctuation,
words past max_input_chars_per_word) and 12 LoCoMo turns.
"""
import argparse
import json
import os
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tokenizer_goldens import TEXTS  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers", "minilm_wordpiece_goldens.json")

BERT_TEXTS = [
    "Hello World",
    "naïve café résumé Ångström Ærøskøbing Œuvre",
    "İstanbul ǅungla ΣΑΣ Straße ß",
    "e\u0301 o\u0308 a\u030a n\u0303 (combining marks)",
    "ṩ ǖ ệ ḯ with stacked accents",
    "中文字符测试，包括标点。日本語です",
    "漢字かなカナ混じり文",
    "한국어 텍스트입니다 안녕하세요",
    "𠀀𠀁 extension-B ideographs and 丽 compatibility",
    "Привет, мир! Как дела?",
    "Ελληνικά κείμενα",
    "😀 smile 🎉🎉 party 👍🏽 ok 👨‍👩‍👧‍👦 family",
    "x🫠y melting face glued",
    "©®™ symbols ± × ÷ € £ ¥",
    "¿qué? ¡sí! «guillemets» „quotes“ — dash – dash … ellipsis",
    "$5 + 3 = 8 ^ `tick` ~tilde | pipe < > @ # % & *",
    "a_b snake_case kebab-case CamelCase dot.separated",
    "a\u200bb zero width space, a\u00adb soft hyphen, a\ufeffb BOM",
    "a\x0bb c\x0cd e\x85f controls that are whitespace elsewhere",
    "a\x00b nul, a\x07b bell, a\x1bb escape, a\ue000b private use",
    "a\u0378b unassigned",
    "nbsp\u00a0ideographic\u3000space en\u2002em\u2003thin\u2009line\u2028para\u2029end",
    "tabs\tnewlines\ncarriage\rreturns",
    "a" * 100,
    "a" * 101,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "[CLS] written [SEP] specials [MASK] and [PAD] [UNK]",
    "[cls] lowercase is not special",
    "ﬁ ligature ½ fraction ² superscript",
    "don't won't I'm you're it's",
    "3.14159, 2,718 and 1e-9; 12:30pm",
    "",
    "    ",
    "\u3000\u00a0\t\n",
]


def locomo_turns(path, n=12):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    turns = []
    for conv in data:
        c = conv["conversation"]
        for key in sorted((k for k in c if k.startswith("session_") and isinstance(c[k], list)),
                          key=lambda k: int(k.split("_")[1])):
            for t in c[key]:
                turns.append(t["text"])
    # A spread over the whole file, plus the longest turn (truncation, many words).
    step = max(1, len(turns) // (n - 1))
    picked = turns[::step][: n - 1] + [max(turns, key=len)]
    return picked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--locomo", default=os.path.join(HERE, "..", "..", "shared", "data", "locomo", "locomo10.json"))
    args = ap.parse_args()
    path = os.path.join(args.model, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        file_truncation = json.load(f).get("truncation")

    def fresh():
        t = Tokenizer.from_file(path)
        t.no_truncation()
        t.no_padding()
        return t

    tok, plain, trunc, trunc_left = fresh(), fresh(), fresh(), fresh()
    plain.encode_special_tokens = True
    trunc.enable_truncation(16, direction="right")
    trunc_left.enable_truncation(16, direction="left")

    texts = []
    for t in TEXTS + BERT_TEXTS + locomo_turns(args.locomo):
        if t not in texts:
            texts.append(t)
    specials = {i for i, a in tok.get_added_tokens_decoder().items() if a.special}
    cases, decode = [], []
    for text in texts:
        enc = tok.encode(text, add_special_tokens=True)
        words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))]
        cases.append({
            "text": text,
            "ids": tok.encode(text, add_special_tokens=False).ids,
            "ids_special": enc.ids,
            "ids_plain": plain.encode(text, add_special_tokens=True).ids,
            "words": words,
            "ids_trunc": trunc.encode(text, add_special_tokens=True).ids,
            "ids_trunc_left": trunc_left.encode(text, add_special_tokens=True).ids,
        })
        for skip in (True, False):
            shown = [i for i in enc.ids if not (skip and i in specials)]
            if shown and tok.id_to_token(shown[0]).startswith("##"):
                continue
            decode.append({"ids": enc.ids, "skip_special": skip, "text": tok.decode(enc.ids, skip_special_tokens=skip)})
    out = {
        "source": "HF tokenizers " + __import__("tokenizers").__version__ + " on all-MiniLM-L6-v2/tokenizer.json",
        "file_truncation": file_truncation,
        "cases": cases,
        "decode": decode,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT, len(cases), "cases", len(decode), "decodes", os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
