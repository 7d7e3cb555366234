#!/usr/bin/env bash
# Runs on the GPU machine (README.md, "A target with an MTP head"): tokenizes the corpus with the bundled model's
# tokenizer, trains a Qwen3 target of ~96M parameters (vocab 16384) with an MTP head (train.py --mtp) for a wall-clock
# budget, and packs the Hugging Face folder into at most 60 MiB ($OUT/model.pack.part-*, 4-bit weights: transport.py),
# beside $OUT/train.log. The device tool returns at most 64 MiB, which is why the target is not 200-400M.
# Usage there: bash .mtpdemo/device_train_mtp.sh [train.py options...]   (reads tokenizer.json and corpus/ beside it)
set -uo pipefail
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
: "${OUT:?OUT must name the folder that comes back}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 train.py --tokenizer tokenizer.json --corpus corpus --out /tmp/hf_mtp --mtp \
    --hidden 768 --layers 12 --heads 12 --kv-heads 4 --head-dim 64 --intermediate 2048 \
    --seq 512 --batch 128 --lr 1e-3 --warmup 300 --minutes 5 "$@" 2>&1 | tee "$OUT/train.log"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then
    python3 transport.py pack /tmp/hf_mtp "$OUT" --max-mib 60 2>&1 | tee -a "$OUT/train.log"
    rc=${PIPESTATUS[0]}
fi
ls -la "$OUT"
exit "$rc"
