#!/usr/bin/env bash
# CTest `openai_client`: the official `openai` Python client against a real `inferscale serve`
# (demo model, CPU, memory from the LoCoMo fixture), through scripts/openai_client_check.py.
# Usage: scripts/openai_client_test.sh INFERSCALE_BINARY
# Exits 77 (skip) when no Python with `openai` is found (scripts/setup.sh installs it in .venv).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
exec "$ROOT/scripts/client_test.sh" "$1" openai "$ROOT/scripts/openai_client_check.py" --base-url "{URL}/v1" --memory-user mini-1
