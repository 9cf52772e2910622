#!/usr/bin/env bash
# The product on the GPU machine, end to end: `inferscale serve --device cuda` with memory, driven
# over HTTP. Runs from the bundle (scripts/gpu_bundle.sh copies it and a stripped `inferscale`):
#   bash .gpu/cuda/gpu_serve_check.sh   (on the GPU host, in a copy of this checkout holding .gpu/cuda)
# Model: a small Llama shape with head_dim 128 (what the CUDA kernels take) and random weights,
# the Mistral v3 tokenizer (DEVICE=cpu runs the same checks on the CPU backend; SERVE_ARGS adds
# `serve` flags, e.g. "--memory-kv-dtype fp8 --kv-cache-dtype fp8"). Prints one PASS/FAIL line per
# check; exits non-zero on any FAIL.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu_out}
W=$(mktemp -d)
mkdir -p "$OUT"
. "$HERE/gpu_env.sh"
B="$HERE/inferscale"
cat > "$W/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4,
 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 32768, "rms_norm_eps": 1e-5,
 "rope_theta": 1000000.0, "max_position_embeddings": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
JSON
fail=0
say() { if [ "$1" = 0 ]; then echo "PASS $2"; else echo "FAIL $2"; fail=1; fi; }

# --device auto with a shape the CUDA kernels do not take (demo: head_dim 32) falls back to the CPU.
"$B" generate --model demo --prompt "hello" --max-tokens 4 --temperature 0 > "$W/demo.txt" 2> "$W/demo.err"
rc=$?; say $rc "generate --model demo on a GPU machine (auto: $(grep -o 'head_dim[^;]*; using the CPU backend' "$W/demo.err" | head -1))"

"$B" memory import-locomo "$HERE/data/locomo10.json" --data-dir "$W/data" > "$W/import.txt" 2>&1
say $? "memory import-locomo (store only): $(tail -1 "$W/import.txt")"

PORT=8123
# serve LOG: in the background, PID set; returns once /health answers.
serve() {
  "$B" serve --model "$W/config.json" --random-weights --random-dtype bf16 --tokenizer "$HERE/data/tokenizer.model.v3" \
    --device "${DEVICE:-cuda}" --data-dir "$W/data" --kv-files --kv-cache-mb 4096 --memory-pool-mb 2048 --port $PORT \
    ${SERVE_ARGS:-} > "$1" 2>&1 &
  PID=$!
  for _ in $(seq 1 120); do
    env -u LD_LIBRARY_PATH python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health')" 2>/dev/null && break
    sleep 0.5
  done
}
serve "$OUT/serve.log"
env -u LD_LIBRARY_PATH python3 - "$PORT" <<'PY'
import json, sys, time, urllib.request, urllib.error
port = sys.argv[1]
def call(path, body=None, method=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
fails = 0
with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models") as m:
    model = json.loads(m.read())["data"][0]["id"]
def check(ok, what):
    global fails
    print(("PASS " if ok else "FAIL ") + what)
    fails += 0 if ok else 1

facts = [{"text": t, "vector": [1.0 if j == i else 0.0 for j in range(4)]}
         for i, t in enumerate(["Ana adopted a cat named Miso", "Ana works as a nurse in Oslo",
                                "Ana likes hiking", "Ana plays the cello"])]
s, r = call("/v1/memory/users/ana/facts", {"facts": facts})
ids = r.get("ids", [])
check(s == 200 and len(ids) == 4, f"add 4 facts with client vectors: {s}")
s, r = call("/v1/memory/users/ana/search", {"vector": [0.1, 0.0, 0.9, 0.2], "k": 2})
check(s == 200 and [h["id"] for h in r["data"]] == [ids[2], ids[3]], f"search by vector on the GPU index: {s} {r.get('data', r)}")
chat = lambda mem, q="What is the cat's name?", n=8: {"model": model, "messages": [{"role": "user", "content": q}],
                                                    "max_tokens": n, "temperature": 0, "ignore_eos": True, "memory": mem}
s, r = call("/v1/chat/completions", chat({"user": "ana", "k": 1, "w": 0, "query_vector": [0, 1, 0, 0]}))
check(s == 200 and [f["id"] for f in r["memory"]["facts"]] == [ids[1]] and r["memory"]["injected_tokens"] > 0,
      f"chat with memory.query_vector injects the matching fact: {s} {r.get('memory', r)}")
q = "When did Caroline go to the LGBTQ support group?"
# Per k: a first inject request encodes the facts (the write path, on demand); then, timed over
# HTTP with one output token, inject (KV resident) vs text (the same facts prefilled; its first
# time, so only the system prompt's blocks come from the prefix cache).
for k in (5, 20, 50):
    s0, r0 = call("/v1/chat/completions", chat({"user": "conv-26", "k": k, "w": 2}, q, 1))
    t0 = time.time(); si, ri = call("/v1/chat/completions", chat({"user": "conv-26", "k": k, "w": 2}, q, 1)); ti = time.time() - t0
    t0 = time.time(); st, rt = call("/v1/chat/completions", chat({"user": "conv-26", "k": k, "w": 2, "mode": "text"}, q, 1)); tt = time.time() - t0
    ok = s0 == 200 and si == 200 and st == 200 and ri["memory"]["encoded"] == 0 and \
         ri["usage"]["prompt_tokens"] == rt["usage"]["prompt_tokens"] and \
         [f["id"] for f in ri["memory"]["facts"]] == [f["id"] for f in rt["memory"]["facts"]]
    check(ok, f"conv-26 k={k}: {ri['usage']['prompt_tokens'] if si == 200 else si} prompt tokens, "
              f"{ri['memory']['injected_tokens'] if si == 200 else '-'} injected ({r0['memory']['encoded'] if s0 == 200 else '-'} facts "
              f"encoded by the first request); same facts and prompt as text; 1-token request over HTTP: "
              f"inject {ti*1000:.1f} ms vs text {tt*1000:.1f} ms")
s, r = call("/v1/chat/completions", chat({"user": "ana", "query_vector": [1, 0]}))
check(s == 400 and "dim" in r["error"]["message"], f"wrong query dim is a 400: {r['error']['message'] if s == 400 else s}")
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as m:
    check(b"inferscale_memory_requests_total" in m.read(), "metrics count memory requests")
sys.exit(1 if fails else 0)
PY
say $? "HTTP checks"
kill -TERM $PID
wait $PID
say $? "serve exits cleanly on SIGTERM"

# A restart reads the facts' KV from the files the first run wrote (the pool's dtype: bf16 on the
# GPU) instead of encoding them again.
serve "$OUT/serve2.log"
KV_MB=$(du -sm "$W/data/kv" | cut -f1)
env -u LD_LIBRARY_PATH python3 - "$PORT" "$KV_MB" <<'PY'
import json, sys, urllib.request
port, kv_mb = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models") as m:
    model = json.loads(m.read())["data"][0]["id"]
body = {"model": model, "messages": [{"role": "user", "content": "When did Caroline go to the LGBTQ support group?"}],
        "max_tokens": 1, "temperature": 0, "memory": {"user": "conv-26", "k": 50, "w": 2}}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    mem = json.loads(r.read())["memory"]
ok = mem["encoded"] == 0 and mem["loaded"] == 50
print(("PASS " if ok else "FAIL ") + f"after a restart the 50 facts' KV comes from the KV files ({kv_mb} MB on disk): "
      f"loaded {mem['loaded']}, encoded {mem['encoded']}, kv {mem['kv_ms']:.1f} ms")
sys.exit(0 if ok else 1)
PY
say $? "restart check"
kill -TERM $PID
wait $PID
grep -E "backend|memory:|vector|error|warn" "$OUT/serve.log" | head -12
exit $fail
