#!/usr/bin/env bash
# Builds mma_gemv (the tensor-core int8 decode-product candidate) (sm_90) next to this script's OUT dir (default .gpu/b8 of the repo): nvcc from CUDA 12.4+.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
out=${1:-$root/.gpu/b8}
${NVCC:-nvcc} -O3 -std=c++17 -arch=sm_90 -Xptxas -v -I "$root/cmf-engine/src/main/resources/dev/cmf4j/backend/cuda" \
  -o "$out/mma_gemv" "$here/mma_gemv.cu" 2> "$out/mma_gemv.ptxas.txt" || { cat "$out/mma_gemv.ptxas.txt"; exit 1; }
grep -B1 "spill" "$out/mma_gemv.ptxas.txt" | grep -v "0 bytes spill" | grep -i "spill" | grep -v " 0 bytes spill stores, 0 bytes spill loads" || true
echo "built $out/mma_gemv"
