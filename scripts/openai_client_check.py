#!/usr/bin/env python3
"""Checks a running `inferscale serve` with the official `openai` Python client.

Usage: .venv/bin/python scripts/openai_client_check.py [--base-url http://127.0.0.1:8000/v1] [--model NAME]
                                                        [--memory-user USER]

Covers: model listing, chat and text completions (plain and streamed, the streamed text equal to
the plain one under greedy decoding), usage, stream_options.include_usage, seeds, stop strings,
scoring (chat logprobs / top_logprobs streamed and not, legacy completion logprobs with echo and
max_tokens 0, vLLM's prompt_logprobs and continue_final_message through `extra_body`), and the
errors the client maps to exceptions (400, 404). With --memory-user (a server started with
--data-dir, USER having facts; one fact's text is the retrieval query): memory through `extra_body`, inject vs text (same facts, same
prompt size), the `memory` report in the first streamed chunk, and scoring with memory: the
logprobs of mode text equal those of a plain request with the same prompt tokens, and mode
inject's are finite and close to them. CI runs it as the ctest
`openai_client` (scripts/openai_client_test.sh starts the server). Prints one line per check and
'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import json
import math
import sys
import urllib.parse
import urllib.request

import openai

from client_checks import Checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default=None, help="default: the first model the server lists")
    ap.add_argument("--memory-user", default=None, help="a user with facts on a server with memory")
    args = ap.parse_args()

    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=120)
    checks = Checks()
    check = checks.check

    def expect_error(exc_type, status, **kwargs):
        try:
            client.chat.completions.create(**kwargs)
        except exc_type as e:
            assert e.status_code == status, f"status {e.status_code}, expected {status}"
            body = e.body if isinstance(e.body, dict) else {}
            assert body.get("message"), f"no error message in {e.body!r}"
            return f"{status} {body.get('message')}"
        raise AssertionError(f"no {exc_type.__name__} raised")

    models = client.models.list().data
    model = args.model or models[0].id
    check("models.list", lambda: ", ".join(m.id for m in models))
    msgs = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Say hello."}]

    def chat_plain():
        r = client.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0)
        c = r.choices[0]
        assert r.object == "chat.completion" and r.id.startswith("chatcmpl-"), r
        assert c.message.role == "assistant" and isinstance(c.message.content, str)
        assert c.finish_reason in ("stop", "length"), c.finish_reason
        assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        return f"{r.usage.completion_tokens} tokens, finish {c.finish_reason}, {c.message.content[:40]!r}"

    def chat_stream_equals_plain():
        plain = client.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0)
        stream = client.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0, stream=True,
                                                stream_options={"include_usage": True})
        text, finish, usage, n = "", None, None, 0
        for chunk in stream:
            n += 1
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
        assert text == plain.choices[0].message.content, f"{text!r} != {plain.choices[0].message.content!r}"
        assert finish == plain.choices[0].finish_reason, finish
        assert usage and usage.completion_tokens == plain.usage.completion_tokens, usage
        return f"{n} chunks, text equal, usage {usage.completion_tokens}"

    def completion_plain_and_stream():
        kw = dict(model=model, prompt="Once upon a time", max_tokens=20, temperature=0.8, seed=7)
        a = client.completions.create(**kw)
        b = client.completions.create(**kw)
        assert a.choices[0].text == b.choices[0].text, "the same seed gave different text"
        s = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices)
        assert s == a.choices[0].text, f"{s!r} != {a.choices[0].text!r}"
        return f"seeded text reproducible and equal when streamed ({len(s)} chars)"

    def stop_string():
        full = client.completions.create(model=model, prompt="abc", max_tokens=40, temperature=0).choices[0].text
        stop = next((ch for ch in full[3:] if ch.isascii() and ch.isprintable()), None)
        if stop is None:
            return "skipped: no ASCII character in the output"
        r = client.completions.create(model=model, prompt="abc", max_tokens=40, temperature=0, stop=[stop])
        assert r.choices[0].text == full[: full.index(stop)], (r.choices[0].text, full)
        assert r.choices[0].finish_reason == "stop"
        return f"stopped before {stop!r}"

    def chat_logprobs_stream_equals_plain():
        kw = dict(model=model, messages=msgs, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
        plain = client.chat.completions.create(**kw)
        content = plain.choices[0].logprobs.content
        assert len(content) == plain.usage.completion_tokens, (len(content), plain.usage)
        for e in content:
            assert len(e.top_logprobs) == 3, e
            assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob, e  # greedy
            assert all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:])), e
            assert e.logprob <= 0 and bytes(e.bytes).decode("utf-8", "replace") == e.token, e
        streamed = []
        for chunk in client.chat.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                if ch.logprobs and ch.logprobs.content:
                    streamed.extend(ch.logprobs.content)
        assert [e.token for e in streamed] == [e.token for e in content]
        worst = max(abs(a.logprob - b.logprob) for a, b in zip(streamed, content))
        assert worst < 1e-5, worst  # the second request hits the prefix cache: float noise only
        return f"{len(content)} tokens, top 3 each, streamed == plain (max diff {worst:.2g})"

    def completion_echo_scores_the_prompt():
        prompt = "The quick brown fox jumps over the lazy dog"
        r = client.completions.create(model=model, prompt=prompt, max_tokens=0, echo=True, logprobs=2)
        c = r.choices[0]
        assert c.text == prompt, c.text
        lp = c.logprobs
        assert len(lp.tokens) == r.usage.prompt_tokens == len(lp.token_logprobs) == len(lp.text_offset), lp
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, lp.token_logprobs[:2]
        assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
        assert all(len(t) in (2, 3) for t in lp.top_logprobs[1:])  # top 2, and the token itself
        assert lp.text_offset == sorted(lp.text_offset) and r.usage.completion_tokens == 0
        # vLLM's prompt_logprobs holds the same values.
        s = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0,
                                      extra_body={"prompt_logprobs": 1, "return_token_ids": True})
        pl, ids = s.choices[0].model_extra["prompt_logprobs"], s.choices[0].model_extra["prompt_token_ids"]
        assert pl[0] is None and len(pl) == len(ids), (pl[:2], len(ids))
        worst = max(abs(pl[i][str(ids[i])]["logprob"] - lp.token_logprobs[i]) for i in range(1, len(ids)))
        assert worst < 1e-5, worst
        return f"{len(lp.tokens)} prompt tokens scored, sum {sum(lp.token_logprobs[1:]):.2f}; prompt_logprobs agree"

    def chat_scores_an_answer():
        conv = msgs + [{"role": "assistant", "content": "Hello!"}]
        r = client.chat.completions.create(model=model, messages=conv, max_tokens=1, temperature=0, extra_body={
            "add_generation_prompt": False, "continue_final_message": True, "prompt_logprobs": 0,
            "return_token_ids": True})
        ids, pl = r.model_extra["prompt_token_ids"], r.model_extra["prompt_logprobs"]
        assert len(ids) == len(pl) == r.usage.prompt_tokens, (len(ids), len(pl), r.usage)
        tail = [pl[i][str(ids[i])]["logprob"] for i in range(len(ids) - 3, len(ids))]
        assert all(math.isfinite(v) and v <= 0 for v in tail), tail
        return f"answer's last 3 tokens: {sum(tail):.2f} nats"

    check("chat.completions", chat_plain)
    check("chat.completions stream == plain", chat_stream_equals_plain)
    check("completions (seed, stream)", completion_plain_and_stream)
    check("stop strings", stop_string)
    check("error: temperature out of range -> 400",
          lambda: expect_error(openai.BadRequestError, 400, model=model, messages=msgs, temperature=9))
    check("chat logprobs (stream == plain)", chat_logprobs_stream_equals_plain)
    check("completions echo + logprobs, max_tokens 0", completion_echo_scores_the_prompt)
    check("chat continue_final_message + prompt_logprobs", chat_scores_an_answer)
    check("error: n=2 -> 400", lambda: expect_error(openai.BadRequestError, 400, model=model, messages=msgs, n=2))
    for name, kw in [("top_logprobs 21", dict(logprobs=True, top_logprobs=21)),
                     ("top_logprobs -1", dict(logprobs=True, top_logprobs=-1)),
                     ("logprobs of the wrong type", dict(logprobs="yes")),
                     ("prompt_logprobs over the limit", dict(extra_body={"prompt_logprobs": 21})),
                     ("echo on chat", dict(extra_body={"echo": True}))]:
        check(f"error: {name} -> 400", lambda kw=kw: expect_error(openai.BadRequestError, 400, model=model, messages=msgs, **kw))
    check("error: unknown model -> 404",
          lambda: expect_error(openai.NotFoundError, 404, model="no-such-model", messages=msgs))
    check("error: empty messages -> 400", lambda: expect_error(openai.BadRequestError, 400, model=model, messages=[]))
    if args.memory_user is None:
        check("error: memory not enabled -> 400",
              lambda: expect_error(openai.BadRequestError, 400, model=model, messages=msgs,
                                   extra_body={"memory": {"user": "alice", "k": 5, "mode": "inject"}}))
    else:
        ask = [{"role": "user", "content": "What did we talk about last time?"}]
        # The retrieval query: the text of one of the user's facts, so the checks find facts for any
        # user that has some, whatever the retriever (a generic question matches no fact with BM25).
        root = args.base_url.rstrip("/").removesuffix("/v1")
        with urllib.request.urlopen(f"{root}/v1/memory/users/{urllib.parse.quote(args.memory_user)}/facts?limit=1") as r:
            facts = json.load(r)["data"]
        assert facts, f"user {args.memory_user} has no facts"
        query = facts[0]["text"]

        def memory_of(mode):
            r = client.chat.completions.create(model=model, messages=ask, max_tokens=8, temperature=0,
                                               extra_body={"memory": {"user": args.memory_user, "k": 5, "mode": mode, "query": query}})
            return r, (r.model_extra or {}).get("memory")

        def memory_inject_vs_text():
            ri, mi = memory_of("inject")
            rt, mt = memory_of("text")
            assert mi and mt, f"no memory report: {ri}"
            assert mi["mode"] == "inject" and mi["injected_tokens"] > 0, mi
            assert [f["id"] for f in mi["facts"]] == [f["id"] for f in mt["facts"]], (mi["facts"], mt["facts"])
            assert ri.usage.prompt_tokens == rt.usage.prompt_tokens, (ri.usage, rt.usage)
            return f"{len(mi['facts'])} facts, {mi['injected_tokens']} injected tokens of {ri.usage.prompt_tokens}"

        def memory_in_first_chunk():
            stream = client.chat.completions.create(
                model=model, messages=ask, max_tokens=8, temperature=0, stream=True,
                extra_body={"memory": {"user": args.memory_user, "k": 3, "query": query}})
            first = next(iter(stream))
            mem = (first.model_extra or {}).get("memory")
            assert mem and len(mem["facts"]) > 0, first
            for _ in stream:
                pass
            return f"first chunk carries {len(mem['facts'])} facts"

        def memory_scoring_text_equals_plain_and_inject_is_close():
            def scored(mode):
                return client.chat.completions.create(
                    model=model, messages=ask, max_tokens=4, temperature=0, logprobs=True, top_logprobs=1,
                    extra_body={"memory": {"user": args.memory_user, "k": 5, "mode": mode, "query": query},
                                "prompt_logprobs": 0,
                                "return_token_ids": True})
            rt, ri = scored("text"), scored("inject")
            ids = rt.model_extra["prompt_token_ids"]
            assert ri.model_extra["prompt_token_ids"] == ids, "inject and text built other tokens"
            injected = ri.usage.prompt_tokens_details.model_extra["injected_tokens"]
            assert injected == ri.model_extra["memory"]["injected_tokens"] > 0, (ri.usage, ri.model_extra["memory"])
            # The plain request with the same prompt tokens (prompt_logprobs: both skip the prefix cache).
            plain = client.completions.create(model=model, prompt=ids, max_tokens=4, temperature=0, logprobs=1,
                                              extra_body={"prompt_logprobs": 0})
            text_lp = [e.logprob for e in rt.choices[0].logprobs.content]
            assert text_lp == plain.choices[0].logprobs.token_logprobs, (text_lp, plain.choices[0].logprobs.token_logprobs)
            assert rt.model_extra["prompt_logprobs"] == plain.choices[0].model_extra["prompt_logprobs"]
            inj_lp = [e.logprob for e in ri.choices[0].logprobs.content]
            assert all(math.isfinite(v) for v in inj_lp), inj_lp
            worst = max(abs(a - b) for a, b in zip(inj_lp, text_lp))
            assert worst < 1.0, (inj_lp, text_lp)
            nulls = sum(1 for e in ri.model_extra["prompt_logprobs"][1:] if e is None)
            assert nulls == injected, (nulls, injected)
            return (f"text == plain over {len(ids)} prompt + 4 tokens; inject within {worst:.3f} nats, "
                    f"{nulls} prompt tokens after injected positions null")

        check("memory: inject vs text", memory_inject_vs_text)
        check("memory: scoring (text == plain, inject close)", memory_scoring_text_equals_plain_and_inject_is_close)
        check("memory: streamed report", memory_in_first_chunk)
        check("error: memory.k out of range -> 400",
              lambda: expect_error(openai.BadRequestError, 400, model=model, messages=ask,
                                   extra_body={"memory": {"user": args.memory_user, "k": 100000}}))
    check("error: prompt too long -> 400",
          lambda: expect_error(openai.BadRequestError, 400, model=model,
                               messages=[{"role": "user", "content": "x " * 200000}]))

    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
