#!/usr/bin/env bash
# Runs on the GPU machine (see README.md): trains into /tmp/hf, then packs the Hugging Face folder
# into parts of at most 15 MiB under $OUT (the device tool returns at most 8 files of 16 MiB each).
# Usage there: bash device_train.sh [train.py options...]   (reads ./data, writes $OUT)
set -uo pipefail
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
: "${OUT:?OUT must name the folder that comes back}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 train.py --data data --out /tmp/hf "$@" 2>&1 | tee "$OUT/train.log"
rc=${PIPESTATUS[0]}
cp /tmp/hf/train_log.json /tmp/hf/check.json "$OUT/" 2>/dev/null
[ -f /tmp/hf/model.safetensors ] && tar cf - -C /tmp hf | split -b 15M - "$OUT/hf.tar.part-"
ls -la "$OUT"
exit "$rc"
