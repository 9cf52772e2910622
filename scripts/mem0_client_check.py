#!/usr/bin/env python3
"""Checks a running `inferscale serve` (with --data-dir) with Mem0's official Python client.

Usage: MEM0_TELEMETRY=false .venv/bin/python scripts/mem0_client_check.py [--host http://127.0.0.1:8000]

`mem0ai`'s MemoryClient(api_key=..., host=URL) against Mem0's platform routes of the server
(src/server/mem0_handler.h): the ping at construction, add (messages with user_id; a string with
filters), search (filters, top_k), get_all (filters, paging), get, update (text, metadata),
history, delete, delete_all, and the errors the client maps to its exceptions: an add without
any entity id (ValidationError, 400) and a get or update of a deleted memory
(MemoryNotFoundError, 404). Then a chat completion whose memory object uses Mem0's names
(user_id, top_k) retrieves what the client added. CI runs it as the ctest `mem0_client`
(scripts/mem0_client_test.sh starts the server). Prints one line per check and
'N passed, N failed'; exits non-zero on a failure.
"""
import argparse
import json
import os
import sys
import urllib.request
import uuid

os.environ.setdefault("MEM0_TELEMETRY", "false")  # before the import: mem0 reads it then

from mem0 import MemoryClient  # noqa: E402
from mem0.exceptions import MemoryNotFoundError, ValidationError  # noqa: E402

from client_checks import Checks  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default="", help="a key the server knows (--api-keys); default: a random one for a server without keys")
    ap.add_argument("--other-key", default="", help="a key of another tenant: it must see none of this tenant's memories")
    args = ap.parse_args()
    checks = Checks()
    check = checks.check

    def raises(exc_type, fn):
        try:
            fn()
        except exc_type as e:
            return f"{type(e).__name__}: {e}"
        raise AssertionError(f"no {exc_type.__name__} raised")

    client = MemoryClient(api_key=args.api_key or "inferscale-" + uuid.uuid4().hex, host=args.host)
    user = "mem0-ci-" + uuid.uuid4().hex[:8]
    state = {}

    def init():
        assert client.org_id and client.project_id, (client.org_id, client.project_id)
        return f"org {client.org_id}, project {client.project_id}"

    def add_messages():
        r = client.add(
            [{"role": "user", "content": "I moved to Austin last month"},
             {"role": "assistant", "content": "Nice! How do you like Texas?"}],
            user_id=user, metadata={"source": "ci"})
        got = r["results"]
        assert len(got) == 2, r
        for m in got:
            assert isinstance(m["id"], str) and m["event"] == "ADD" and m["user_id"] == user, m
        assert got[0]["memory"] == "I moved to Austin last month", got
        assert got[0]["metadata"] == {"source": "ci"}, got[0]
        state["austin"] = got[0]["id"]
        return ", ".join(m["id"] for m in got)

    def add_string():
        r = client.add("My dog is called Rex", filters={"user_id": user}, infer=False)
        assert [m["memory"] for m in r["results"]] == ["My dog is called Rex"], r
        state["rex"] = r["results"][0]["id"]

    def search():
        r = client.search("What is my dog called? Rex", filters={"user_id": user}, top_k=1)
        hits = r["results"]
        assert len(hits) == 1 and hits[0]["id"] == state["rex"], r
        assert isinstance(hits[0]["score"], float) and hits[0]["score"] > 0, hits[0]
        return f"score {hits[0]['score']:.3f}"

    def get_all():
        r = client.get_all(filters={"user_id": user})
        assert r["count"] == 3 and len(r["results"]) == 3, r
        page = client.get_all(filters={"user_id": user}, page=1, page_size=2)
        assert len(page["results"]) == 2 and page["next"] and page["previous"] is None, page
        last = client.get_all(filters={"user_id": user}, page=2, page_size=2)
        assert [m["memory"] for m in last["results"]] == ["My dog is called Rex"] and last["next"] is None, last
        return f"count {r['count']}"

    def get():
        m = client.get(state["austin"])
        assert m["memory"] == "I moved to Austin last month" and m["user_id"] == user, m
        assert m["created_at"] and m["updated_at"], m

    def update():
        m = client.update(state["austin"], text="I moved to Denver last month")
        assert m["memory"] == "I moved to Denver last month", m
        m = client.update(state["austin"], metadata={"source": "ci", "checked": True})
        assert m["metadata"] == {"source": "ci", "checked": True}, m
        assert client.get(state["austin"])["memory"] == "I moved to Denver last month"

    def history():
        h = client.history(state["austin"])
        assert [e["event"] for e in h] == ["ADD", "UPDATE", "UPDATE"], h
        assert h[1]["old_memory"] == "I moved to Austin last month", h[1]
        assert h[1]["new_memory"] == "I moved to Denver last month", h[1]
        return f"{len(h)} events"

    def delete():
        r = client.delete(state["austin"])
        assert r.get("message"), r
        return raises(MemoryNotFoundError, lambda: client.get(state["austin"]))

    def update_deleted():
        return raises(MemoryNotFoundError, lambda: client.update(state["austin"], text="back again"))

    def add_without_entity():
        return raises(ValidationError, lambda: client.add("no owner"))

    def chat_reads_the_same_memory():
        base = args.host.rstrip("/")
        auth = {"Authorization": "Bearer " + args.api_key} if args.api_key else {}
        with urllib.request.urlopen(urllib.request.Request(base + "/v1/models", headers=auth), timeout=60) as f:
            model = json.load(f)["data"][0]["id"]
        body = {"model": model, "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": "What is my dog called?"}],
                "memory": {"user_id": user, "top_k": 1}}
        headers = {"Content-Type": "application/json", **auth}
        req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(req, timeout=120) as f:
            facts = json.load(f)["memory"]["facts"]
        assert [f["text"] for f in facts] == ["My dog is called Rex"], facts

    def other_tenant_sees_nothing():
        other = MemoryClient(api_key=args.other_key, host=args.host)
        got = other.get_all(filters={"user_id": user})
        assert got["count"] == 0 and got["results"] == [], got
        hits = other.search("dog", filters={"user_id": user})
        assert hits["results"] == [] if isinstance(hits, dict) else hits == [], hits
        raises(MemoryNotFoundError, lambda: other.get(state["rex"]))
        return "get_all, search and get of the other tenant's memory: nothing"

    def wrong_key_is_refused():
        raises(Exception, lambda: MemoryClient(api_key="not-a-key", host=args.host))
        return "the client's constructor (GET /v1/ping/) fails with a wrong key"

    def delete_all():
        r = client.delete_all(user_id=user)
        assert r.get("message"), r
        left = client.get_all(filters={"user_id": user})
        assert left["count"] == 0 and left["results"] == [], left

    steps = [("init (GET /v1/ping/)", init), ("add messages", add_messages), ("add a string", add_string),
             ("search", search), ("get_all", get_all), ("get", get), ("update", update),
             ("history", history), ("delete", delete), ("update of a deleted memory", update_deleted),
             ("add without an entity id", add_without_entity),
             ("chat memory with Mem0's names", chat_reads_the_same_memory)]
    if args.other_key:
        steps += [("another tenant's key sees nothing", other_tenant_sees_nothing),
                  ("a wrong key is refused", wrong_key_is_refused)]
    steps.append(("delete_all", delete_all))
    for name, fn in steps:
        check(name, fn)
    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
