#!/usr/bin/env bash
# install-deps.sh: installs, with apt-get on Debian 12, the packages the build and the tests need. Packages already
# installed are skipped, so on a prepared machine this returns at once without touching apt.
set -euo pipefail

PACKAGES=(
    build-essential cmake pkg-config git   # toolchain
    python3 python3-pip unzip              # scripts/fetch-model.sh
    python3-numpy                          # tests/ref/bitnet_b158_ref.py
    libcli11-dev libfmt-dev libpcre2-dev nlohmann-json3-dev libreadline-dev
    googletest libgtest-dev libbenchmark-dev
    tmux                                   # tests of the interactive chat
)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps.sh: all ${#PACKAGES[@]} packages present" >&2
    exit 0
fi

command -v apt-get >/dev/null || {
    echo "install-deps.sh: apt-get not found; install these yourself: ${missing[*]}" >&2
    exit 1
}
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || {
        echo "install-deps.sh: not root and no sudo; install as root: ${missing[*]}" >&2
        exit 1
    }
    SUDO=(sudo)
fi

echo "install-deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -qq -y --no-install-recommends "${missing[@]}" >/dev/null
