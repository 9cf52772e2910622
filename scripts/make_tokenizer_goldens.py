#!/usr/bin/env python3
"""Writes the tokenizer and chat-template goldens under tests/fixtures/tokenizers/.

Run with a Python that has transformers (5.x), tokenizers, sentencepiece and gguf:
    /work/venv/bin/python scripts/make_tokenizer_goldens.py [--data ../shared/data]

Where each golden comes from:
- llama3.1, qwen: the HF `tokenizers` library on the shared tokenizer.json files (qwen3/tokenizer.json
  stands in for Qwen2.5's; see shared/data/README.md section 3). `ids_plain` uses
  encode_special_tokens=True, i.e. transformers' split_special_tokens: special tokens written in the
  text are tokenized as text, non-special added tokens are still matched.
- mistral-v3: `ids` follow a documented hybrid. Leading-space handling is HF transformers'
  (LlamaTokenizer converted from the .model with legacy=False: Metaspace prepend_scheme "first", i.e.
  a "▁" is prepended only to text at the very start of the input, and only when it does not already
  start with a space; text after a special token gets none). The pieces themselves are sentencepiece's
  (the model's own segmentation, which the C++ side gets from libsentencepiece). The two differ on
  runs of whitespace: HF's converted BPE runs over the whole text and merges "▁▁" first, while
  sentencepiece splits at whitespace ("a  b": HF [▁a, ▁▁, b], sentencepiece [▁a, ▁, ▁b]). Those cases
  carry `hf_ids` as well. Why sentencepiece's pieces: it is how the model was trained and how
  mistral-common (Mistral's reference tokenizer) segments text.
- stories260K: `ids` from a Python re-implementation of llama.cpp's SPM tokenizer (below): a dummy
  prefix space on text at the start and after every special token, ' ' -> '▁', bigram merges by
  highest score, <0xXX> byte fallback. It is cross-checked against HF transformers loading the GGUF
  (AutoTokenizer(gguf_file=...)); `hf_ids` is stored where they differ (only leading-space handling:
  HF uses prepend_scheme "first" there too). The vocabulary arrays are extracted with the `gguf`
  package into stories260K_vocab.json so the C++ test can build the vocabulary without a GGUF reader.
- smollm2 (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by scripts/fetch_models.sh): `ids` from
  HF `tokenizers` with SmolLM2's own pre-tokenizer (its tokenizer.json: Sequence[Digits(individual_digits),
  ByteLevel]) over the vocabulary and merges transformers reads from the GGUF. That is what llama.cpp
  runs for tokenizer.ggml.pre = "smollm" (a \\p{N} split, then GPT-2's). transformers' own GGUF loader
  (AutoTokenizer(gguf_file=...)) has no entry for "smollm" and keeps GPT2Tokenizer's plain ByteLevel
  split: it agrees except where a digit follows a run of spaces or a numeric symbol like "½" ("a  1":
  HF-GGUF [a, Ġ, Ġ1 -> Ġ, 1], SmolLM2 [a, ĠĠ, 1]). Those cases carry `hf_gguf_ids` as well.
- gguf_pre_tokenizer_goldens.json: the regex pieces of each GGUF pre-tokenizer group, from HF
  `tokenizers` pre-tokenizers built independently of the C++ table where a reference exists:
  gpt-2 = ByteLevel(use_regex=True), llama-bpe and qwen2 = transformers' GGUF_PRE_TOKENIZER_SPLITS,
  smollm = SmolLM2's Digits + ByteLevel; default = llama.cpp's four regexes (src/llama-vocab.cpp) as
  Split steps (no other reference exists).
- chat templates: transformers' apply_chat_template(tokenize=False) with the template text of each
  family: llama3 = shared llama3.1/tokenizer_config.json (a Llama 3.0-style template), llama31 =
  llama3.1_chat_template.jinja, chatml = shared qwen2.5/tokenizer_config.json, mistral =
  mistral_v0.3_chat_template.jinja (origins in tests/fixtures/tokenizers/README.md), smollm2 = the
  GGUF's tokenizer.chat_template rendered by the tokenizer transformers builds from that GGUF.
"""
import argparse
import json
import os
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers")

LONG_PARAGRAPH = (
    "Caroline had been thinking about the trip for weeks. She wrote down everything she wanted to "
    "see: the old harbour, the market where her grandmother used to buy spices, and the small "
    "museum with its 1,200 paintings. \"We'll leave at 6:45 a.m.,\" she told Melanie, \"and we "
    "won't be back before midnight!\" Melanie laughed; she'd heard that before. In the end they "
    "stayed three days, spent $432.10 on souvenirs, and came home with 17 photos of the same "
    "lighthouse.\n\nThe next morning, Caroline opened her notebook again - this time to plan "
    "the garden: tomatoes, basil (lots of basil), and a row of sunflowers along the fence."
)

TEXTS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "multiple   spaces   inside",
    "tabs\tand\t\ttabs",
    "new\nline",
    "\n\nleading newlines",
    "windows\r\nline\r\nendings",
    "mixed \t\n whitespace \n\n\n",
    "   ",
    "\t",
    "\n",
    "a",
    "I'm sure you're right, he's late, they've gone, we'll see, she'd know, it's fine",
    "DON'T SHOUT, I'M HERE AND THEY'LL HEAR",
    "café naïve résumé façade",
    "Ünïcödé Ångström Ærøskøbing",
    "decomposed e\u0301 and o\u0308",
    "中文字符测试，包括标点。",
    "日本語のテキストとカタカナ",
    "한국어 텍스트입니다",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦",
    "🤖",
    "flags 🇺🇸🇯🇵 and ✓ ★ ♥",
    "1234567890",
    "3.14159 2.71828 -0.5 1e-9",
    "phone 555-123-4567 year 2024",
    "a long number 12345678901234567890123456789",
    "def foo(x):\n    return x * 2  # comment\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "SELECT * FROM users WHERE id = 42;",
    "special <|begin_of_text|> tokens <|eot_id|> in text",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "[INST] What is 2+2? [/INST] 4</s>",
    "<s>hi</s> there",
    "[INST]glued[/INST]",
    "URL https://example.com/path?q=1&r=2#frag",
    "email someone@example.org",
    "!!!???...---",
    "ﬁ ligature and ½ fraction ²",
    "zero\u200bwidth and nbsp\u00a0here",
    "x" * 64,
    " " * 17 + "end",
    "line one\n\n\n\nline five",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    LONG_PARAGRAPH,
]

# Where SmolLM2's split (every digit alone) and GPT-2's differ: digits after whitespace runs.
SMOLLM_EXTRA = ["a  1", "x = 1  +  2", "total:   42", "  7 items", "\n 3", "rev  2.0 and  3rd"]

# Strings on which the GGUF pre-tokenizer groups split differently.
PRE_TEXTS = TEXTS[1:] + SMOLLM_EXTRA + [
    "I'M HERE, YOU'RE LATE, IT'S 12345 O'CLOCK",
    "price $1,234,567.89 <= 2^10 | ~x + y",
    "   leading\n\n  x\r\n\ty",
    "ab12cd 3456ef",
    "!!!ok??? (a)[b]{c}",
    "tab\t\tafter   \n\n\nnext",
]

# Id sequences decoded with skip_special both ways (in addition to every encoded golden).
DECODE_EXTRA = {
    "llama3.1": [[128000, 9906, 1917, 128009], [128006, 882, 128007, 271, 13347, 128009]],
    "qwen": [[151644, 872, 198, 6023, 151645, 151643], [151657, 87, 151658]],
    "mistral-v3": [[1, 3, 23325, 4], [29473, 23325], [1, 29473, 2294], [1027, 29494]],
    "stories260K": [[1, 403, 407, 2], [410, 346, 306, 414]],
    "smollm2": [[1, 4093, 198, 6004, 2, 198], [0, 19556, 2], [216, 216, 198, 33, 34]],
}


def dump(name, obj):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", path)


# ---------------------------------------------------------------------------------------------------
# HF tokenizer.json (llama3.1, qwen)


def hf_json_goldens(path, label, source):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    plain = Tokenizer.from_file(path)
    plain.encode_special_tokens = True
    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_special": tok.encode(text, add_special_tokens=True).ids,
            "ids_plain": plain.encode(text, add_special_tokens=False).ids,
        })
    decode = decode_cases(lambda ids, skip: tok.decode(ids, skip_special_tokens=skip), cases, DECODE_EXTRA[label])
    dump(f"{label}_goldens.json", {"source": source, "cases": cases, "decode": decode})


def decode_cases(decode_fn, cases, extra):
    out = []
    seqs = [c["ids_special"] for c in cases] + extra
    for ids in seqs:
        for skip in (True, False):
            out.append({"ids": ids, "skip_special": skip, "text": decode_fn(ids, skip)})
    return out


# ---------------------------------------------------------------------------------------------------
# Mistral v3 (sentencepiece)


def cases_against_hf(hf, make_case, label):
    """Cases from make_case(text); `hf_ids` added where HF transformers encodes differently.
    Returns (cases, number that differ, decode cases from HF's decoder)."""
    cases, n_diff = [], 0
    for text in TEXTS:
        case = make_case(text)
        hf_ids = hf.encode(text, add_special_tokens=False)
        if hf_ids != case["ids"]:
            case["hf_ids"] = hf_ids
            n_diff += 1
        cases.append(case)
    decode = decode_cases(lambda ids, skip: hf.backend_tokenizer.decode(ids, skip_special_tokens=skip),
                          cases, DECODE_EXTRA[label])
    return cases, n_diff, decode


def split_on_added(text, added):
    """Splits text at added-token strings, leftmost-longest (as HF's AddedVocabulary does).
    Yields (is_token, piece, start_offset)."""
    i, start = 0, 0
    by_len = sorted(added, key=len, reverse=True)
    while i < len(text):
        hit = next((a for a in by_len if text.startswith(a, i)), None)
        if hit is None:
            i += 1
            continue
        if start < i:
            yield False, text[start:i], start
        yield True, hit, i
        i += len(hit)
        start = i
    if start < len(text):
        yield False, text[start:], start


def mistral_hf_tokenizer(model_path):
    """LlamaTokenizer converted from the .model with legacy=False (Mistral-7B-Instruct-v0.3's
    tokenizer_config.json settings)."""
    from transformers import AutoTokenizer

    tmp = tempfile.mkdtemp()
    os.symlink(model_path, os.path.join(tmp, "tokenizer.model"))
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "legacy": False, "add_bos_token": True,
                   "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f)
    return AutoTokenizer.from_pretrained(tmp)


def mistral_goldens(data):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    model_path = os.path.join(data, "tokenizers/mistral-v3/tokenizer.model.v3")
    proto = pb.ModelProto()
    proto.ParseFromString(open(model_path, "rb").read())
    proto.normalizer_spec.add_dummy_prefix = False  # the prefix is decided per segment below
    sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    sp_plain = spm.SentencePieceProcessor(model_file=model_path)
    control = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.is_control(i)]
    control += ["<unk>"]  # HF makes <unk>, <s>, </s> and every control piece a special added token

    def hybrid(text, parse_special):
        ids = []
        for is_tok, piece, start in split_on_added(text, control if parse_special else []):
            if is_tok:
                ids.append(sp.piece_to_id(piece))
                continue
            if start == 0 and not piece.startswith(" "):
                piece = " " + piece
            ids += sp.encode(piece)
        return ids

    hf = mistral_hf_tokenizer(model_path)
    cases, n_diff, decode = cases_against_hf(
        hf, lambda text: {"text": text, "ids": hybrid(text, True), "ids_special": [1] + hybrid(text, True),
                          "ids_plain": hybrid(text, False), "sentencepiece_ids": sp_plain.encode(text)},
        "mistral-v3")
    dump("mistral-v3_goldens.json", {
        "source": "ids: HF legacy=False leading-space rules + sentencepiece pieces (see "
                  "scripts/make_tokenizer_goldens.py); hf_ids where HF transformers differs "
                  f"({n_diff} of {len(cases)}); decode: HF tokenizers decoder",
        "cases": cases, "decode": decode})


# ---------------------------------------------------------------------------------------------------
# stories260K GGUF (llama.cpp SPM algorithm)


def load_gguf_vocab(path):
    from gguf import GGUFReader

    r = GGUFReader(path)
    f = r.fields
    get = lambda k: f[k].contents() if k in f else None
    return {
        "tokens": get("tokenizer.ggml.tokens"),
        "scores": [float(x) for x in get("tokenizer.ggml.scores")],
        "token_type": [int(x) for x in get("tokenizer.ggml.token_type")],
        "bos_token_id": get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": get("tokenizer.ggml.eos_token_id"),
        "unknown_token_id": get("tokenizer.ggml.unknown_token_id"),
        "add_bos_token": get("tokenizer.ggml.add_bos_token"),
        "add_space_prefix": get("tokenizer.ggml.add_space_prefix"),
    }


def spm_llamacpp_tokenize(vocab, text, parse_special, add_bos):
    """llama.cpp's SPM tokenizer, written from its description (see module docstring)."""
    import heapq

    tokens, scores, types = vocab["tokens"], vocab["scores"], vocab["token_type"]
    lookup = {t: i for i, t in enumerate(tokens)}
    # llama.cpp matches unknown (2), control (3) and user-defined (4) tokens written in the text;
    # without parse_special only the user-defined ones.
    specials = [t for t, ty in zip(tokens, types) if ty == 4 or (parse_special and ty in (2, 3))]
    out = [vocab["bos_token_id"]] if add_bos else []
    prev_special = True
    for is_tok, piece, _ in split_on_added(text, specials):
        if is_tok:
            out.append(lookup[piece])
            prev_special = True
            continue
        if prev_special:
            piece = " " + piece
        prev_special = False
        piece = piece.replace(" ", "\u2581")
        syms = list(piece)  # one symbol per code point
        alive = [True] * len(syms)
        nxt = list(range(1, len(syms) + 1))
        prv = list(range(-1, len(syms) - 1))
        heap, rev = [], {}

        def push(l, r):
            if l < 0 or r >= len(syms):
                return
            t = syms[l] + syms[r]
            if t in lookup:
                heapq.heappush(heap, (-scores[lookup[t]], l, r, len(t)))
        for i in range(len(syms) - 1):
            push(i, i + 1)
        while heap:
            _, l, r, n = heapq.heappop(heap)
            if not alive[l] or not alive[r] or len(syms[l]) + len(syms[r]) != n or nxt[l] != r:
                continue
            rev[syms[l] + syms[r]] = (syms[l], syms[r])
            syms[l] += syms[r]
            alive[r] = False
            nxt[l] = nxt[r]
            if nxt[r] < len(syms):
                prv[nxt[r]] = l
            push(prv[l], l)
            push(l, nxt[l])

        def emit(s):
            if s in lookup:
                out.append(lookup[s])
            elif s in rev:
                emit(rev[s][0]); emit(rev[s][1])
            else:
                for b in s.encode("utf-8"):
                    out.append(lookup[f"<0x{b:02X}>"])
        i = 0
        while i < len(syms):
            emit(syms[i])
            i = nxt[i]
    return out


def stories_goldens(data):
    path = os.path.join(data, "models/stories260K/stories260K.gguf")
    vocab = load_gguf_vocab(path)
    add_bos = vocab["add_bos_token"] if vocab["add_bos_token"] is not None else True
    dump("stories260K_vocab.json", {
        "source": "tokenizer.ggml.* arrays of shared/data/models/stories260K/stories260K.gguf (MIT), "
                  "extracted with the gguf package", **vocab})
    hf = hf_gguf_tokenizer(path)
    cases, n_diff, decode = cases_against_hf(
        hf, lambda text: {"text": text, "ids": spm_llamacpp_tokenize(vocab, text, True, False),
                          "ids_special": spm_llamacpp_tokenize(vocab, text, True, add_bos),
                          "ids_plain": spm_llamacpp_tokenize(vocab, text, False, False)},
        "stories260K")
    dump("stories260K_goldens.json", {
        "source": "ids: Python re-implementation of llama.cpp's SPM tokenizer; hf_ids where HF "
                  f"transformers (gguf_file=) differs ({n_diff} of {len(cases)}); decode: HF tokenizers decoder",
        "cases": cases, "decode": decode})


def hf_gguf_tokenizer(path):
    # transformers reads the file's unset pad id (0xFFFFFFFF) as an index; drop out-of-range ids.
    import transformers.integrations.gguf.reader as reader
    from transformers import AutoTokenizer

    original = reader.read_gguf_metadata

    def patched(p, *a, **k):
        md, rest = original(p, *a, **k)
        n = md.get("tokenizer.ggml.tokens")
        n = n if isinstance(n, int) else len(n)
        for key in [k for k in md if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")]:
            if isinstance(md[key], int) and md[key] >= n:
                del md[key]
        return md, rest

    reader.read_gguf_metadata = patched
    try:
        return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    finally:
        reader.read_gguf_metadata = original


# ---------------------------------------------------------------------------------------------------
# SmolLM2 GGUF (gpt2 vocabulary, pre-tokenizer "smollm")

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_pre_tokenizer():
    """SmolLM2's own pre-tokenizer (HuggingFaceTB/SmolLM2-135M-Instruct tokenizer.json)."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])


def smollm2_goldens(models):
    path = os.path.join(models, SMOLLM2_GGUF)
    hf = hf_gguf_tokenizer(path)
    own = hf_gguf_tokenizer(path)
    own.backend_tokenizer.pre_tokenizer = smollm2_pre_tokenizer()
    backend = own.backend_tokenizer
    plain = hf_gguf_tokenizer(path).backend_tokenizer
    plain.pre_tokenizer = smollm2_pre_tokenizer()
    plain.encode_special_tokens = True
    cases, n_diff = [], 0
    for text in TEXTS + SMOLLM_EXTRA:
        case = {"text": text,
                "ids": backend.encode(text, add_special_tokens=False).ids,
                "ids_special": backend.encode(text, add_special_tokens=True).ids,
                "ids_plain": plain.encode(text, add_special_tokens=False).ids}
        hf_ids = hf.encode(text, add_special_tokens=False)
        if hf_ids != case["ids"]:
            case["hf_gguf_ids"] = hf_ids
            n_diff += 1
        cases.append(case)
    decode = decode_cases(lambda ids, skip: backend.decode(ids, skip_special_tokens=skip), cases,
                          DECODE_EXTRA["smollm2"])
    # The GGUF's chat template rendered and tokenized by transformers (the prompt ids a server sends).
    chat = []
    for conv in CONVERSATIONS[:4]:
        ids = hf.apply_chat_template(conv, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        chat.append({"messages": conv, "ids": list(ids)})
    dump("smollm2_goldens.json", {
        "source": f"ids: HF tokenizers, SmolLM2's pre-tokenizer (Digits individual + ByteLevel) over the "
                  f"vocabulary transformers reads from models/{SMOLLM2_GGUF}; hf_gguf_ids where "
                  f"transformers' GGUF loader (GPT-2 split only) differs ({n_diff} of {len(cases)}); "
                  "decode: HF tokenizers decoder",
        "cases": cases, "decode": decode, "chat": chat})


def pre_tokenizer_goldens():
    from tokenizers import Regex, pre_tokenizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    def split(regex):
        return pre_tokenizers.Split(Regex(regex), behavior="isolated")

    gpt2_llamacpp = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
    groups = {
        "default": pre_tokenizers.Sequence([split(r"[\p{P}\$\+<=>\^~\|]+"), split(gpt2_llamacpp),
                                            split(r"\p{N}+"), split("[0-9][0-9][0-9]")]),
        "gpt-2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        "llama-bpe": split(GGUF_PRE_TOKENIZER_SPLITS["llama-bpe"]),
        "qwen2": split(GGUF_PRE_TOKENIZER_SPLITS["qwen2"]),
        "smollm": smollm2_pre_tokenizer(),
    }
    out = {}
    for name, pre in groups.items():
        # Offsets index the original text, so the pieces come back as raw text (not ByteLevel's alphabet).
        out[name] = [{"text": t, "pieces": [t[a:b] for _, (a, b) in pre.pre_tokenize_str(t)]} for t in PRE_TEXTS]
    names = list(groups)
    for i, a in enumerate(names):  # every pair of groups must split some text differently
        for b in names[i + 1:]:
            assert any(x["pieces"] != y["pieces"] for x, y in zip(out[a], out[b])), (a, b)
    dump("gguf_pre_tokenizer_goldens.json", {
        "source": "HF tokenizers pre_tokenize_str: gpt-2 = ByteLevel(use_regex=True); llama-bpe, qwen2 = "
                  "transformers GGUF_PRE_TOKENIZER_SPLITS; smollm = Digits(individual_digits) + ByteLevel "
                  "(SmolLM2's tokenizer.json); default = llama.cpp's regex_exprs as Split(isolated) steps",
        "groups": out})


# ---------------------------------------------------------------------------------------------------
# Chat templates

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  Hi there \n"}, {"role": "assistant", "content": " Hello! How can I help?  "},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "  Be kind.\n"}, {"role": "user", "content": "Bonjour, ça va ? 😀"},
     {"role": "assistant", "content": "Oui, merci."}, {"role": "user", "content": "中文可以吗？"}],
    [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}],
    [{"role": "user", "content": "multi\nline\n\ncontent"}, {"role": "assistant", "content": "ok"}],
]
# Conversations the family's template rejects (raise_exception / undefined access in Jinja).
BAD_CONVERSATIONS = [
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
]


def chat_goldens(data, models):
    from transformers import AutoTokenizer

    llama = AutoTokenizer.from_pretrained(os.path.join(data, "tokenizers/llama3.1"))
    qwen = AutoTokenizer.from_pretrained(os.path.join(data, "tokenizers/qwen2.5"))
    mistral_tok = mistral_hf_tokenizer(os.path.join(data, "tokenizers/mistral-v3/tokenizer.model.v3"))
    llama31 = open(os.path.join(OUT, "llama3.1_chat_template.jinja")).read()
    mistral = open(os.path.join(OUT, "mistral_v0.3_chat_template.jinja")).read()
    smol = hf_gguf_tokenizer(os.path.join(models, SMOLLM2_GGUF))
    families = {
        "llama3": (llama, llama.chat_template),
        "llama31": (llama, llama31),
        "chatml": (qwen, qwen.chat_template),
        "mistral": (mistral_tok, mistral),
        "smollm2": (smol, smol.chat_template),
    }
    # The family each template is (what ChatTemplate::detect must say).
    family_of = {"llama3": "llama3", "llama31": "llama3.1", "chatml": "chatml", "mistral": "mistral",
                 "smollm2": "chatml"}
    cases = []
    for family, (tok, template) in families.items():
        for conv in CONVERSATIONS:
            for gen in (False, True):
                text = tok.apply_chat_template(conv, chat_template=template, add_generation_prompt=gen, tokenize=False)
                cases.append({"family": family, "messages": conv, "add_generation_prompt": gen, "text": text})
        for conv in BAD_CONVERSATIONS:
            try:
                text = tok.apply_chat_template(conv, chat_template=template, add_generation_prompt=True, tokenize=False)
                cases.append({"family": family, "messages": conv, "add_generation_prompt": True, "text": text})
            except Exception as e:  # the template rejects it: the C++ side must throw
                cases.append({"family": family, "messages": conv, "add_generation_prompt": True,
                              "error": str(e)})
    dump("chat_template_goldens.json", {
        "source": "transformers apply_chat_template(tokenize=False); templates: llama3 = shared "
                  "llama3.1/tokenizer_config.json, llama31 = llama3.1_chat_template.jinja, chatml = shared "
                  "qwen2.5/tokenizer_config.json, mistral = mistral_v0.3_chat_template.jinja, smollm2 = "
                  f"tokenizer.chat_template of models/{SMOLLM2_GGUF} (transformers' GGUF loader)",
        "detect": {name: template for name, (_, template) in families.items()},
        "families": family_of,
        "cases": cases})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--models", default=os.path.join(HERE, "..", "models"),
                    help="folder with the fetched models (scripts/fetch_models.sh)")
    args = ap.parse_args()
    data = os.path.abspath(args.data)
    models = os.path.abspath(args.models)
    os.makedirs(OUT, exist_ok=True)
    hf_json_goldens(os.path.join(data, "tokenizers/llama3.1/tokenizer.json"), "llama3.1",
                    "HF tokenizers on shared/data/tokenizers/llama3.1/tokenizer.json")
    hf_json_goldens(os.path.join(data, "tokenizers/qwen3/tokenizer.json"), "qwen",
                    "HF tokenizers on shared/data/tokenizers/qwen3/tokenizer.json (the Qwen2.5 BPE)")
    mistral_goldens(data)
    stories_goldens(data)
    smollm2_goldens(models)
    pre_tokenizer_goldens()
    chat_goldens(data, models)


if __name__ == "__main__":
    main()
