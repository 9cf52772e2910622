#!/usr/bin/env bash
# CTest `mem0_client`: the official `mem0ai` Python MemoryClient against a real `inferscale serve`
# (demo model, CPU, behind API keys), through scripts/mem0_client_check.py.
# Usage: scripts/mem0_client_test.sh INFERSCALE_BINARY
# Exits 77 (skip) when no Python with `mem0` is found (scripts/setup.sh installs mem0ai in .venv).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# Behind API keys of two tenants: the client's `Token` header carries its key, and the other
# tenant's key must see none of the memories.
export CLIENT_API_KEYS="ci-key-acme acme;ci-key-globex globex"
exec "$ROOT/scripts/client_test.sh" "$1" mem0 "$ROOT/scripts/mem0_client_check.py" --host "{URL}" \
  --api-key ci-key-acme --other-key ci-key-globex
