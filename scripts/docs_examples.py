#!/usr/bin/env python3
"""Runs the curl and Python examples of Markdown files against a running server, as written.

    scripts/docs_examples.py --port PORT [--python PY] README.md docs/API.md

A ```sh block is an example to run when every command in it (each line that starts at column 0
and is not a comment) is a `curl` call; blocks of other commands (builds, the CLI, the server
itself) are documentation only. Each runs under `bash -e` with `curl` failing on an HTTP error
(`--fail-with-body`), so a 4xx or 5xx answer fails the example. A ```python block runs with --python.
The only change made to an example is the port: `localhost:8000` and `127.0.0.1:8000` become
--port's. The blocks run in document order, files in the order given, against one server.
Prints each example's result and 'N passed, N failed'; exits 1 on a failure or when no example
was found.
"""
import argparse
import re
import subprocess
import sys

FENCE = re.compile(r"^```(\w*)\s*$")
CURL_PRELUDE = 'curl() { command curl --fail-with-body -sS "$@"; echo; }\n'


def blocks(path):
    """(language, first line number, text) of every fenced block."""
    out, lang, start, lines = [], None, 0, []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = FENCE.match(line.rstrip("\n"))
        if m and lang is None:
            lang, start, lines = m.group(1), n + 1, []
        elif line.startswith("```") and lang is not None:
            out.append((lang, start, "".join(lines)))
            lang = None
        elif lang is not None:
            lines.append(line)
    return out


def is_curl_block(text):
    commands = [l for l in text.splitlines() if l and not l[0].isspace() and not l.startswith("#")]
    return bool(commands) and all(l.startswith("curl ") for l in commands)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    passed = failed = 0
    for path in args.files:
        for lang, line, text in blocks(path):
            text = re.sub(r"(localhost|127\.0\.0\.1):8000", rf"\g<1>:{args.port}", text)
            if lang == "sh" and is_curl_block(text):
                cmd = ["bash", "-e", "-c", CURL_PRELUDE + text]
            elif lang == "python":
                cmd = [args.python, "-c", text]
            else:
                continue
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            ok = r.returncode == 0
            passed += ok
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {path}:{line} ({lang})")
            if not ok:
                print("  " + (r.stdout + r.stderr).strip().replace("\n", "\n  ")[-2000:])
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
