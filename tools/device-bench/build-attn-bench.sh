#!/usr/bin/env bash
# Builds attn_bench (sm_90) into OUT dir (default .gpu/b8 of the repo): nvcc from CUDA 12.4+.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
out=${1:-$root/.gpu/b8}
${NVCC:-nvcc} -O3 -std=c++17 -arch=sm_90 -Xptxas -v -I "$root/cmf-engine/src/main/resources/dev/cmf4j/backend/cuda" \
  -o "$out/attn_bench" "$here/attn_bench.cu" 2> "$out/attn_bench.ptxas.txt" || { cat "$out/attn_bench.ptxas.txt"; exit 1; }
grep -i "spill" "$out/attn_bench.ptxas.txt" | grep -v " 0 bytes spill stores, 0 bytes spill loads" || true
echo "built $out/attn_bench"
