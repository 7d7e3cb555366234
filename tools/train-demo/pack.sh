#!/usr/bin/env bash
# Copies what the GPU run needs (train.py, device_train.sh, the tokenized corpus, xz-compressed)
# into DEST (default /work/main/.traindemo, a folder ignored via .git/info/exclude), which the
# device tool's `carry` then sends along.  Usage: bash pack.sh [DATA_DIR] [DEST]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="${1:-$HERE/work/data}"
DEST="${2:-/work/main/.traindemo}"
mkdir -p "$DEST/data"
cp "$HERE/train.py" "$HERE/device_train.sh" "$DEST/"
cp "$DATA/tokenizer.json" "$DATA/meta.json" "$DEST/data/"
for f in train.u16 valid.u16 valid_chat.u16; do
  xz -T2 -6 -c "$DATA/$f" > "$DEST/data/$f.xz"
done
du -sh "$DEST"; ls -la "$DEST" "$DEST/data"
