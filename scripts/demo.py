#!/usr/bin/env python3
"""The README's memory demo against a running server (the one scripts/run.sh starts).

    scripts/demo.sh [--base-url http://127.0.0.1:8000] [--check] [--runs 10]

1. Writes alice's memory in the tenant `demo` (its own tenant, so it touches no one else's; the
   user is forgotten first, so every run starts alike): a few facts through the memory REST API,
   and one chat message with `"memory": {"store": true}` (the message is stored, not the reply).
2. Asks alice's questions with memory in mode inject, greedy (temperature 0), streaming, as
   `"name": "Alice"`, and prints for each the facts the server placed, the answer and the time to
   first token seen here.
3. Asks "What is my cat called?" --runs times with the server's default sampling (no temperature
   sent; seeds 1..N) and counts the answers that name the cat.

--check (the ctest `demo`): exits 1 unless every greedy answer to a CHECKED question holds its key
value. SmolLM2-135M answers the other two wrong (docs/QUALITY.md has the whole personal-facts
table). Standard library only.
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse

TENANT = "demo"
USER = "alice"
FACTS = [
    {"text": "Alice adopted a cat named Miso", "speaker": "Alice", "date": "2024-03-02"},
    {"text": "Alice's sister Clara lives in Lisbon", "speaker": "Alice", "date": "2024-04-11"},
    {"text": "Alice works as a pharmacist in Porto", "speaker": "Alice", "date": "2024-05-20"},
    {"text": "Alice is allergic to peanuts", "speaker": "Alice", "date": "2024-06-08"},
]
NAME = "Alice"
CHAT = "I started learning the cello last month."
# (question, key values: a correct answer contains one of them, case-insensitive, checked by --check)
QUESTIONS = [
    ("What is my cat called?", ["Miso"], True),
    ("Where does my sister live?", ["Lisbon"], True),
    ("What instrument am I learning?", ["cello"], True),
    ("What is my job?", ["pharmacist"], False),
    ("What am I allergic to?", ["peanut"], False),
]


class Server:
    def __init__(self, base_url):
        u = urllib.parse.urlparse(base_url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json", "X-InferScale-Tenant": TENANT}

    def call(self, method, path, body=None, ok_statuses=()):
        c = http.client.HTTPConnection(self.host, self.port, timeout=300)
        try:
            c.request(method, path, json.dumps(body) if body is not None else None, self.headers)
            r = c.getresponse()
            data = r.read().decode()
        except OSError as e:
            sys.exit(f"demo: cannot reach the server at {self.host}:{self.port} ({e}); start it with ./scripts/run.sh")
        finally:
            c.close()
        if r.status >= 300 and r.status not in ok_statuses:
            sys.exit(f"demo: {method} {path} answered {r.status}: {data}")
        return json.loads(data) if data and r.status < 300 else None

    def ask(self, model, question, sampling, store=False):
        """Streams one chat with memory; returns (answer, facts placed, ttft seconds)."""
        body = {"model": model, "max_tokens": 48, "stream": True,
                "messages": [{"role": "user", "content": question}],
                "memory": {"user": USER, "name": NAME, "k": 5, "mode": "inject", "store": store}}
        body.update(sampling)
        c = http.client.HTTPConnection(self.host, self.port, timeout=300)
        t0 = time.perf_counter()
        c.request("POST", "/v1/chat/completions", json.dumps(body), self.headers)
        r = c.getresponse()
        if r.status != 200:
            sys.exit(f"demo: the chat answered {r.status}: {r.read().decode()}")
        answer, facts, ttft = "", [], None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "memory" in chunk and "facts" in chunk["memory"]:
                facts = chunk["memory"]["facts"]
            for choice in chunk.get("choices", []):
                text = choice.get("delta", {}).get("content") or ""
                if text and ttft is None:
                    ttft = time.perf_counter() - t0
                answer += text
        c.close()
        return answer.strip(), facts, ttft or 0.0


def holds(answer, keys):
    return any(k.lower() in answer.lower() for k in keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--check", action="store_true", help="exit 1 unless every greedy answer holds its key value")
    ap.add_argument("--runs", type=int, default=10, help="seeded runs of the cat question with the default sampling")
    args = ap.parse_args()
    s = Server(args.base_url)
    model = s.call("GET", "/v1/models")["data"][0]["id"]
    s.call("DELETE", f"/v1/memory/users/{USER}", ok_statuses=(404,))  # 404: no facts yet
    s.call("POST", f"/v1/memory/users/{USER}/facts", {"facts": FACTS})
    print(f"model {model}; {USER} has {len(FACTS)} facts (tenant {TENANT}) and says:\n{USER}> {CHAT}")
    reply, _, _ = s.ask(model, CHAT, {"temperature": 0}, store=True)
    print(f"    {reply}\n")

    wrong = []
    for question, keys, checked in QUESTIONS:
        answer, facts, ttft = s.ask(model, question, {"temperature": 0})
        ok = holds(answer, keys)
        wrong += [] if ok or not checked else [question]
        print(f"{USER}> {question}")
        for f in facts:
            print(f"    memory [{f['id']}] {f['text']}")
        print(f"    answer ({'ok' if ok else 'MISSING ' + keys[0]}, TTFT {ttft * 1e3:.0f} ms, inject, greedy): {answer}\n")

    question, keys, _ = QUESTIONS[0]
    hits = 0
    for seed in range(1, args.runs + 1):
        answer, _, _ = s.ask(model, question, {"seed": seed})
        hits += holds(answer, keys)
        print(f"    default sampling, seed {seed}: {answer}")
    print(f"\n'{question}' with the server's default sampling: {hits} of {args.runs} answers name {keys[0]}")
    checked = sum(1 for q in QUESTIONS if q[2])
    print(f"greedy: {checked - len(wrong)} of the {checked} checked answers hold their key value")
    if args.check and wrong:
        print("demo check failed: " + "; ".join(wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
