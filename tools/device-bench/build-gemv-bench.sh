#!/usr/bin/env bash
# Builds the decode-product microbenchmarks gemv_bench, mma_gemv, hmma_gemv and pattern_bench (sm_90) into OUT (default .gpu/b8 of the repo),
# with ptxas's register/spill report next to each (NAME.ptxas.txt): nvcc from CUDA 12.4+. NAMES=gemv_bench picks one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
out=${1:-$root/.gpu/b8}
for name in ${NAMES:-gemv_bench mma_gemv hmma_gemv pattern_bench}; do
  ${NVCC:-nvcc} -O3 -std=c++17 -arch=sm_90 -Xptxas -v -I "$root/cmf-engine/src/main/resources/dev/cmf4j/backend/cuda" \
    -o "$out/$name" "$here/$name.cu" 2> "$out/$name.ptxas.txt" || { cat "$out/$name.ptxas.txt"; exit 1; }
  # every function that spills, by name (ptxas names it on the "Function properties for" line before its spill line)
  awk '/Function properties for/ { f = $NF } /bytes spill/ && !/ 0 bytes spill stores, 0 bytes spill loads/ { print "  spills: " f ": " $0 }' "$out/$name.ptxas.txt"
  echo "built $out/$name"
done
