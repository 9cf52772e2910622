#!/usr/bin/env bash
# The README's memory demo against the server scripts/run.sh starts: writes alice's memory (tenant
# demo), asks her questions with memory injected and prints the answers, the facts used and the
# TTFT. Usage: scripts/demo.sh [--base-url URL] [--check] [--runs N]   (scripts/demo.py)
exec python3 "$(dirname "$0")/demo.py" "$@"
