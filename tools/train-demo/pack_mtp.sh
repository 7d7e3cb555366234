#!/usr/bin/env bash
# Puts what device_train_mtp.sh needs into DEST (default /work/main/.mtpdemo; list it in .git/info/exclude), which the
# device tool's `carry` then sends: train.py, transport.py, the device script, the tokenizer.json of the model whose
# vocabulary the target shares (`./cmf export-hf models/default.cmf -o DIR` writes DIR/tokenizer.json) and the corpus
# text xz-compressed (the tree that travels is limited to 64 MiB; the raw text is 67 MB).
# Usage: bash pack_mtp.sh TOKENIZER_JSON [CORPUS_DIR] [DEST]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
TOK="${1:?the tokenizer.json of the bundled model (cmf export-hf)}"
CORPUS="${2:-$HERE/work/corpus}"
DEST="${3:-/work/main/.mtpdemo}"
mkdir -p "$DEST/corpus"
cp "$HERE/train.py" "$HERE/transport.py" "$HERE/device_train_mtp.sh" "$DEST/"
cp "$TOK" "$DEST/tokenizer.json"
for f in train.txt valid.txt; do
  xz -T2 -6 -c "$CORPUS/$f" > "$DEST/corpus/$f.xz"
done
du -sh "$DEST"; ls -la "$DEST" "$DEST/corpus"
