#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora: small valid inputs of each format, made here (never
copies of real model files or datasets), so the fuzzers start from inputs that pass the parsers'
first checks. Usage: make_corpus.py OUT_DIR  (writes OUT_DIR/<target>/<name>)."""
import json
import os
import struct
import sys

# ---------------------------------------------------------------------------------------------
# GGUF v3 (llama.cpp's gguf.md): header, metadata key/values, tensor infos, aligned data.
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_U64 = 4, 5, 6, 7, 8, 9, 10
# ggml tensor types and their blocks (values, bytes)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
        "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
        "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gvalue(v):
    if isinstance(v, bool):
        return struct.pack("<I", GGUF_BOOL) + struct.pack("<?", v)
    if isinstance(v, int):
        return struct.pack("<I", GGUF_U32) + struct.pack("<I", v)
    if isinstance(v, float):
        return struct.pack("<I", GGUF_F32) + struct.pack("<f", v)
    if isinstance(v, str):
        return struct.pack("<I", GGUF_STRING) + gstr(v)
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, len(v)) + b"".join(gstr(x) for x in v)
        if all(isinstance(x, float) for x in v):
            return struct.pack("<IIQ", GGUF_ARRAY, GGUF_F32, len(v)) + b"".join(struct.pack("<f", x) for x in v)
        return struct.pack("<IIQ", GGUF_ARRAY, GGUF_I32, len(v)) + b"".join(struct.pack("<i", x) for x in v)
    raise TypeError(v)


def gguf(metadata, tensors, alignment=32):
    """tensors: [(name, type name, shape as GGUF ne (fastest first))]; data is a byte pattern."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, v in metadata.items():
        out += gstr(k) + gvalue(v)
    offset, datas = 0, []
    for name, tname, ne in tensors:
        tid, block, nbytes = GGML[tname]
        n = 1
        for d in ne:
            n *= d
        size = n // block * nbytes
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", tid, offset)
        data = bytes((i * 7 + 3) % 251 for i in range(size))
        # Block formats keep an f16 scale first: a small, finite one (0x3c00 = 1.0).
        if block > 1:
            data = bytearray(data)
            for b in range(0, size, nbytes):
                data[b:b + 2] = b"\x00\x3c"
            data = bytes(data)
        datas.append(data + b"\x00" * ((-len(data)) % alignment))
        offset += len(datas[-1])
    out += b"\x00" * ((-len(out)) % alignment)
    return out + b"".join(datas)


def llama_metadata(vocab, model="llama"):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(4)] + vocab
    md = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.feed_forward_length": 128,
          "llama.block_count": 1, "llama.attention.head_count": 2, "llama.attention.head_count_kv": 1,
          "llama.context_length": 256, "llama.attention.layer_norm_rms_epsilon": 1e-5,
          "llama.rope.freq_base": 10000.0, "tokenizer.ggml.model": model, "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": [float(-i) for i in range(len(tokens))],
          "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 4 + [1] * len(vocab),
          "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    if model == "gpt2":
        md["tokenizer.ggml.merges"] = ["h e", "l l", "he ll"]
        md["tokenizer.ggml.pre"] = "default"
    return md


def gguf_seeds():
    vocab = ["\u2581", "\u2581H", "e", "l", "o", "\u2581w", "r", "d", "h", "he", "ll", "hell"]
    seeds = {}
    tensors = [("token_embd.weight", "Q4_1", [64, 19]), ("blk.0.attn_norm.weight", "F32", [64]),
               ("blk.0.attn_q.weight", "Q8_0", [64, 64]), ("blk.0.attn_k.weight", "Q4_0", [64, 32]),
               ("blk.0.attn_v.weight", "Q5_0", [64, 32]), ("blk.0.attn_output.weight", "Q5_1", [64, 64]),
               ("blk.0.ffn_norm.weight", "F16", [64]), ("blk.0.ffn_gate.weight", "Q4_K", [256, 128]),
               ("blk.0.ffn_up.weight", "Q6_K", [256, 128]), ("blk.0.ffn_down.weight", "Q2_K", [256, 64]),
               ("output_norm.weight", "BF16", [64]), ("output.weight", "Q3_K", [256, 19]),
               ("extra.q5k", "Q5_K", [256, 1])]
    seeds["llama_spm.gguf"] = gguf(llama_metadata(vocab), tensors)
    seeds["llama_bpe.gguf"] = gguf(llama_metadata(vocab, "gpt2"), tensors[:3])
    seeds["metadata_only.gguf"] = gguf({"general.architecture": "llama", "nested": [1, 2, 3]}, [])
    return seeds


# ---------------------------------------------------------------------------------------------
def safetensors(entries, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, width in entries:
        n = 1
        for d in shape:
            n *= d
        blob = bytes((i * 13 + 1) % 256 for i in range(n * width))
        if dtype in ("F32",):
            blob = b"".join(struct.pack("<f", 0.25 * (i % 7)) for i in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    return {"small.safetensors": safetensors([("a.weight", "F32", [3, 4], 4), ("b.bias", "BF16", [5], 2),
                                              ("c", "F16", [2, 2, 2], 2)], {"format": "pt"}),
            "empty.safetensors": safetensors([])}


# ---------------------------------------------------------------------------------------------
def config_seeds():
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
             "rope_theta": 500000.0, "vocab_size": 300, "bos_token_id": 1, "eos_token_id": [2, 3],
             "tie_word_embeddings": True,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 128}}
    qwen = dict(llama, architectures=["Qwen2ForCausalLM"], model_type="qwen2", rope_scaling=None,
                use_sliding_window=False)
    qwen3 = dict(qwen, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32)
    bert = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64,
            "vocab_size": 100, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    return {f"{k}.json": json.dumps(v).encode() for k, v in
            {"llama": llama, "qwen2": qwen, "qwen3": qwen3, "bert": bert}.items()}


# ---------------------------------------------------------------------------------------------
def byte_level_vocab():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): i for i, c in enumerate(cs)}


def tokenizer_json_seeds():
    vocab = byte_level_vocab()
    for t in ["He", "ll", "Hell", "Hello", "\u0120w", "\u0120wor"]:
        vocab[t] = len(vocab)
    bpe = {"version": "1.0", "added_tokens": [{"id": len(vocab), "content": "<|im_start|>", "special": True,
                                                "single_word": False, "lstrip": False, "rstrip": False,
                                                "normalized": False}],
           "normalizer": {"type": "NFC"},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
                "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
           "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": ["H e", "l l", "He ll", "Hell o", "\u0120 w", "\u0120w or"],
                     "ignore_merges": False, "byte_fallback": False}}
    wp_vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", ",", "!", "caf", "##e"])}
    wordpiece = {"version": "1.0", "added_tokens": [],
                 "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                                "strip_accents": None, "lowercase": True},
                 "pre_tokenizer": {"type": "BertPreTokenizer"},
                 "post_processor": {"type": "TemplateProcessing",
                                    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                               {"Sequence": {"id": "A", "type_id": 0}},
                                               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                                    "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                                   "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
                 "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
                 "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                           "max_input_chars_per_word": 100, "vocab": wp_vocab}}
    return {"bpe-tokenizer.json": json.dumps(bpe).encode(), "wordpiece-tokenizer.json": json.dumps(wordpiece).encode()}


# ---------------------------------------------------------------------------------------------
# SentencePiece ModelProto (sentencepiece_model.proto), written field by field.
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 5:
        return key + struct.pack("<f", payload)
    return key + varint(len(payload)) + payload


def spm(model_type, pieces, byte_fallback=False):
    out = b""
    for text, score, ptype in pieces:
        out += field(1, 2, field(1, 2, text.encode()) + field(2, 5, score) + field(3, 0, ptype))
    trainer = field(3, 0, model_type) + field(35, 0, 1 if byte_fallback else 0) + field(40, 0, 0) + \
        field(41, 0, 1) + field(42, 0, 2)
    normalizer = field(1, 2, b"identity") + field(3, 0, 1) + field(4, 0, 0)  # add_dummy_prefix
    return out + field(2, 2, trainer) + field(3, 2, normalizer)


def spm_seeds():
    base = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    words = [("\u2581", -1.0, 1), ("\u2581Hello", -2.0, 1), ("\u2581wor", -3.0, 1), ("ld", -3.5, 1), ("H", -5.0, 1),
             ("e", -5.0, 1), ("l", -5.0, 1), ("o", -5.0, 1), (",", -6.0, 1), ("!", -6.0, 1)]
    bytes_ = [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    return {"unigram-tokenizer.model": spm(1, base + words), "bpe-tokenizer.model": spm(2, base + words + bytes_, True)}


# ---------------------------------------------------------------------------------------------
def chat_template_seeds():
    chatml = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
              "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    llama3 = ("{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
              "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
    mistral = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
               "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
               "eos_token}}{% endif %}{% endfor %}")
    gemma = ("{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
             "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
             "{{'<start_of_turn>model\\n'}}{% endif %}")
    smol = chatml.replace("{% for message", "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
                          "You are a helpful AI assistant named SmolLM<|im_end|>\\n' }}{% endif %}{% for message")
    return {f"{k}.jinja": v.encode() for k, v in
            {"chatml": chatml, "llama3": llama3, "mistral": mistral, "gemma": gemma, "smollm2": smol, "empty": ""}.items()}


def http_seeds():
    bodies = {
        "chat.json": {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                      "temperature": 0.2, "top_p": 0.9, "max_tokens": 16, "stream": True,
                      "stream_options": {"include_usage": True}, "stop": ["\n"], "seed": 7, "logprobs": True,
                      "top_logprobs": 3},
        "chat_memory.json": {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "Where?"}]}],
                             "memory": {"user": "alice", "mode": "inject", "k": 5, "w": 2, "recompute": 2,
                                        "store": True, "query_vector": [0.1, 0.2]}},
        "completion.json": {"model": "m", "prompt": "Once upon", "max_tokens": 8, "echo": True, "logprobs": 2,
                            "n": 1, "min_p": 0.05, "top_k": 40, "stop_token_ids": [2], "ignore_eos": False},
        "completion_ids.json": {"model": "m", "prompt": [1, 2, 3], "prompt_logprobs": 1, "return_token_ids": True},
    }
    return {k: json.dumps(v).encode() for k, v in bodies.items()}


def mem0_seeds():
    bodies = {
        "add.json": {"messages": [{"role": "user", "content": "I moved to Lisbon", "name": "alice"},
                                  {"role": "assistant", "content": "Nice!"}],
                     "user_id": "alice", "agent_id": "travel", "metadata": {"topic": "home"}, "infer": False},
        "add_string.json": {"messages": "I like tea", "run_id": "r1"},
        "add_filters.json": {"messages": {"role": "user", "content": "x"},
                             "filters": {"AND": [{"user_id": "bob"}, {"topic": "*"}]}},
        "update.json": {"text": "new", "metadata": {"k": 1}, "stored": json.dumps({"agent_id": "travel", "role": "user"}),
                        "id": "17"},
    }
    return {k: json.dumps(v).encode() for k, v in bodies.items()}


def memory_rest_seeds():
    # fuzz_memory_rest's input: a route byte (its index in kShapes), the {user} line, the {id} or
    # query line, then the body.
    def req(route, user, second, body):
        return bytes([route]) + user.encode() + b"\n" + second.encode() + b"\n" + body.encode()
    facts = {"facts": [{"text": "Ann likes tea", "timestamp": "2023-05-08", "speaker": "Ann", "metadata": {"k": 1}},
                       {"text": "Ann has a cat", "embedding": [0.1, 0.2]}]}
    turns = {"conversation": "c1", "turns": [{"text": "did you buy the kayak", "speaker": "Ann", "session": "s1"},
                                            {"text": "yes, on tuesday", "speaker": "Bob", "session": "s1"}]}
    return {"add_facts.req": req(3, "ann", "", json.dumps(facts)),
            "add_turns.req": req(3, "ann", "", json.dumps(turns)),
            "list.req": req(4, "ann", "after=1&limit=2", ""),
            "get.req": req(5, "ann", "1", ""),
            "patch.req": req(6, "ann", "1", json.dumps({"text": "Ann likes green tea", "metadata": {"k": 2}})),
            "delete.req": req(7, "ann", "2", ""),
            "search.req": req(8, "ann", "", json.dumps({"query": "kayak", "k": 3})),
            "users.req": req(0, "", "", ""),
            "user_encoded.req": req(1, "a%20n%2Fn", "", "")}


def http_socket_seeds():
    # fuzz_http_socket's input: the raw bytes of one connection (one or more requests).
    key = "Authorization: Bearer sk-fuzz-0123456789\r\n"
    def post(path, body, extra=""):
        b = json.dumps(body)
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\n{key}{extra}Content-Type: application/json\r\n"
                f"Content-Length: {len(b)}\r\n\r\n{b}")
    parts = ['{"prompt": "hi", "max_to', 'kens": 2, "n": 1}']
    chunked = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + key + "Transfer-Encoding: chunked\r\n\r\n" +
               "".join(f"{len(p):x}\r\n{p}\r\n" for p in parts) + "0\r\n\r\n")
    return {"health.http": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
            "no_key.http": b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
            "models.http": f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{key}\r\n".encode(),
            "completion.http": post("/v1/completions", {"model": "demo", "prompt": "Once", "max_tokens": 2}).encode(),
            "chat_stream.http": post("/v1/chat/completions", {"model": "demo", "stream": True, "max_tokens": 2,
                                                              "messages": [{"role": "user", "content": "hi"}]}).encode(),
            "chunked.http": chunked.encode(),
            "pipelined.http": (f"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                               post("/v1/completions", {"prompt": "a", "max_tokens": 1}, "Connection: close\r\n")).encode(),
            "memory.http": f"GET /v1/memory/users HTTP/1.1\r\nHost: x\r\n{key}\r\n".encode()}


def request_scope_seeds():
    # fuzz_request_scope's input: the query line, header lines up to an empty line, then a body.
    def req(query, headers, body=""):
        return (query + "\n" + "".join(h + "\n" for h in headers) + "\n" + body).encode()
    return {"list.req": req("user_id=alice&limit=5", ["Authorization: Bearer sk-acme-7f3c2a10d4"]),
            "search.req": req("user_id=alice&agent_id=travel&top_k=3", ["X-API-Key: sk-globex-55aa01"],
                              json.dumps({"query": "tea", "filters": {"AND": [{"user_id": "alice"}]}})),
            "token.req": req("run_id=r%201&page=2&page_size=10", ["Authorization: Token sk-acme-7f3c2a10d4",
                                                                  "X-InferScale-Tenant: acme"]),
            "two_keys.req": req("", ["Authorization: Bearer a", "Authorization: Bearer b"]),
            "tenant.req": req("app_id=x", ["X-InferScale-Tenant: globex"], json.dumps({"user_id": "bob"}))}


def api_keys_seeds():
    return {"keys.txt": b"# keys\nsk-acme-7f3c2a10d4   acme\n"
                        b"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\tglobex  # ops\n\n"}


def kv_file_seeds():
    # The key fuzz_kv_file reads with: fingerprint, fact 7, version 1, window 2, 2 layers, kv 8.
    def header(tokens, dtype, pool, checksum):
        return b"ISKV" + struct.pack("<IQqqiQiiiIIQ", 3, 0x1234abcd5678ef00, 7, 1, 2, 0x99, tokens, 2, 8, dtype, pool, checksum)
    payload = b"".join(struct.pack("<e", 0.125 * (i % 9)) for i in range(2 * 2 * 3 * 8))
    seeds = {"f16_wrong_checksum.kv": header(3, 1, 0, 0) + payload}
    try:
        import xxhash
        seeds["f16.kv"] = header(3, 1, 0, xxhash.xxh3_64_intdigest(payload)) + payload
    except ImportError:  # Debian's python3-xxhash: without it the fuzzer starts at the checksum
        pass
    return seeds


def imports_seeds():
    locomo = [{"sample_id": "conv-x", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                      {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!", "img_url": ["x"], "blip_caption": "a cat"}],
        "session_2_date_time": "2:00 pm on 9 May, 2023",
        "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "How is the cat?"}]},
        "qa": [{"question": "What did Ann adopt?", "answer": "a cat", "evidence": ["D1:1", "D8:6; D9:17"], "category": 1},
               {"question": "When?", "answer": 2023, "evidence": ["D:11:26"], "category": 2},
               {"question": "Adversarial?", "adversarial_answer": "no", "evidence": [], "category": 5}]}]
    facts_jsonl = b"\n".join(json.dumps(r).encode() for r in [
        {"text": "Ann likes tea", "speaker": "Ann", "timestamp": "2023-05-08", "metadata": {"k": 1}},
        {"text": "Bob moved", "embedding": [0.1, 0.2, 0.3], "session": "s1", "turn": 3}])
    return {"locomo.json": json.dumps(locomo).encode(), "facts.jsonl": facts_jsonl,
            "facts.json": json.dumps([{"text": "one fact"}]).encode()}


TARGETS = {"fuzz_gguf": gguf_seeds, "fuzz_safetensors": safetensors_seeds, "fuzz_model_config": config_seeds,
           "fuzz_tokenizer_json": tokenizer_json_seeds, "fuzz_spm": spm_seeds, "fuzz_chat_template": chat_template_seeds,
           "fuzz_http": http_seeds, "fuzz_http_socket": http_socket_seeds, "fuzz_mem0": mem0_seeds, "fuzz_memory_rest": memory_rest_seeds, "fuzz_request_scope": request_scope_seeds, "fuzz_api_keys": api_keys_seeds, "fuzz_kv_file": kv_file_seeds,
           "fuzz_imports": imports_seeds}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for target, make in TARGETS.items():
        d = os.path.join(sys.argv[1], target)
        os.makedirs(d, exist_ok=True)
        for name, data in make().items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    print(f"seed corpora of {len(TARGETS)} targets in {sys.argv[1]}")


if __name__ == "__main__":
    main()
