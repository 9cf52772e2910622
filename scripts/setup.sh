#!/usr/bin/env bash
# Installs every Debian package the build and the tests need. Idempotent, non-interactive.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config git ca-certificates
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libcli11-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev libsqlite3-dev libxxhash-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libssl-dev zlib1g-dev
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: installed ${missing[*]}"
