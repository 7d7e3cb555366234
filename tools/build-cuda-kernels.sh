#!/usr/bin/env bash
# Builds every CUDA kernel file of the engine, cmf-engine/src/main/resources/dev/cmf4j/backend/cuda/NAME.cu,
# into NAME.fatbin next to it (committed, shipped in the jar, loaded with cuModuleLoadData), and writes
# NAME.fatbin.stamp recording the SHA-256 of the exact source it was built from (with the headers it includes,
# `#include "X.cuh"` beside it, inlined: common.cuh is shared by the kernel files). At run time the
# engine uses the fatbin only when that hash equals the jar's NAME.cu (else it compiles NAME.cu with NVRTC, if
# present); the CI test ShippedKernelsTest fails when a stamp does not match its source.
#
# Run it after every edit of a .cu or .cuh file, then commit the sources, .fatbin and .fatbin.stamp together:
#     tools/build-cuda-kernels.sh            (needs nvcc from CUDA 13: NVCC=/path/to/nvcc to pick one; ONLY=NAME builds NAME.cu alone)
#
# The fatbin holds SASS for sm_80 (A100), sm_86 (RTX 30xx, A10/A40), sm_89 (RTX 40xx, L4/L40), sm_90 (H100/H200),
# sm_100 (B200) and sm_120 (RTX 50xx) — a GPU of the same major and a higher minor runs the nearest lower
# one — plus compute_80 PTX, which the driver compiles once (and caches) for any other GPU from sm_80 up.
# Compile options are those of the NVRTC path (CudaContext.compileOptions: C++17, nvcc's default f32 math:
# no fast-math, FMA contraction on), so both paths run the same code.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=cmf-engine/src/main/resources/dev/cmf4j/backend/cuda
NVCC=${NVCC:-nvcc}
SASS=(80 86 89 90 100 120)
PTX=80
OPTIONS=(-std=c++17 --compress-mode=size)

# Reads the ptxas -v report of one build of every SASS target (stdin, or the file $1) and prints registers and
# spills per kernel and target; fails when any kernel spills on any target, and when a target has no report at all
# (a log of another build, or ptxas wording this parser no longer knows). $2 names the source in the lines.
# SPILLS_OK="sm_80 sm_120" (say) lets those targets spill with a warning instead (a kernel tuned on one GPU may
# spill a little on another whose limits differ). Spills of at most SPILL_SLACK bytes (default 32) on a target other
# than sm_90, the one the kernels are tuned and measured on, are warned about, not failed: ptxas saves a register
# or two around a math-library call on some targets (resident_arch.cu's MoE gate/up on sm_80/86/89: 4–28 bytes).
check_ptxas() {
    awk -v f="$2" -v targets="${SASS[*]}" -v ok="${SPILLS_OK:-}" -v slack="${SPILL_SLACK:-32}" '
        BEGIN {
            n = split(targets, t, " "); for (i = 1; i <= n; i++) want["sm_" t[i]] = 1
            n = split(ok, t, " "); for (i = 1; i <= n; i++) allowed[t[i]] = 1
        }
        /Compiling entry function/ { split($0, q, "\047"); k = q[2]; a = q[4]; sp = 0 }
        /spill stores/ { sp = $5 + $9 }
        /Used [0-9]+ registers/ {
            printf "  %s %-6s %-24s %3d registers, %d bytes spilled\n", f, a, k, $5, sp
            seen[a] = 1
            if (sp > 0 && (a in allowed)) printf "  ^ spills on %s (allowed by SPILLS_OK)\n", a
            else if (sp > 0 && a != "sm_90" && sp <= slack) printf "  ^ spills %d bytes on %s (within SPILL_SLACK)\n", sp, a
            else if (sp > 0) { bad = 1; printf "  ^ spills on %s\n", a }
        }
        END {
            for (s in want) if (!(s in seen)) { printf "  %s: no ptxas report for %s\n", f, s; bad = 1 }
            exit bad
        }' "${1:-/dev/stdin}"
}
# tools/build-cuda-kernels.sh --check-ptxas LOG [NAME]: only the check above, on a saved report (no nvcc needed)
if [ "${1:-}" = --check-ptxas ]; then
    log=$2; [[ $log = /* ]] || log=$OLDPWD/$log   # relative to where the script was started (it cd'ed above)
    check_ptxas "$log" "${3:-$(basename "$log")}"; exit
fi

command -v "$NVCC" >/dev/null || { echo "build-cuda-kernels: nvcc not found (set NVCC=/path/to/nvcc, CUDA 13)" >&2; exit 1; }
NVCC_VERSION=$("$NVCC" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p')
[ -n "$NVCC_VERSION" ] || { echo "build-cuda-kernels: cannot read the version of $NVCC" >&2; exit 1; }

GENCODE=()
TARGETS=()
for a in "${SASS[@]}"; do GENCODE+=(-gencode "arch=compute_$a,code=sm_$a"); TARGETS+=("sm_$a"); done
GENCODE+=(-gencode "arch=compute_$PTX,code=compute_$PTX"); TARGETS+=("compute_$PTX")

# a kernel file as the engine reads it (KernelSource.text): each `#include "X.cuh"` line replaced by X.cuh (one level)
expand() {
    awk -v dir="$DIR" '/^#include "[A-Za-z0-9_.]+\.cuh"[ \t\r]*$/ {
        f = $0; sub(/^#include "/, "", f); sub(/".*$/, "", f)
        if (!(f in seen)) { seen[f] = 1; while ((getline l < (dir "/" f)) > 0) print l; close(dir "/" f) }
        next
    } { print }' "$1"
}
# the hash the engine compares: the source (its headers inlined) with carriage returns dropped (a CRLF checkout stays fresh)
sha() { if grep -q '^#include "' "$1"; then expand "$1"; else cat "$1"; fi | tr -d '\r' | sha256sum | cut -d' ' -f1; }

shopt -s nullglob
built=0
for cu in "$DIR"/${ONLY:-*}.cu; do   # ONLY=NAME: that file alone
    name=$(basename "$cu" .cu)
    out="$DIR/$name.fatbin"
    tmp=$(mktemp "$DIR/.$name.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    # registers and spills per kernel on every SASS target the fatbin holds, for the record; a spill on any fails
    # the build (a throwaway build of the same targets with ptxas -v: the shipped one is built without it)
    log=$("$NVCC" -fatbin "${OPTIONS[0]}" "${GENCODE[@]}" -Xptxas -v -o /dev/null "$cu" 2>&1) \
        || { echo "$log"; echo "build-cuda-kernels: $cu failed to compile" >&2; exit 1; }
    check_ptxas <(echo "$log") "$name.cu" \
        || { echo "build-cuda-kernels: $cu spills registers on a target, or ptxas reported none for one (see above)" >&2; exit 1; }
    "$NVCC" -fatbin "${OPTIONS[@]}" "${GENCODE[@]}" -o "$tmp" "$cu"
    mv "$tmp" "$out"
    trap - EXIT
    {
        echo "# Written by tools/build-cuda-kernels.sh: what $name.fatbin was built from. Do not edit; rerun the script."
        echo "source $name.cu"
        echo "source-sha256 $(sha "$cu")"
        echo "fatbin-sha256 $(sha256sum "$out" | cut -d' ' -f1)"
        echo "nvcc $NVCC_VERSION"
        echo "targets ${TARGETS[*]}"
        echo "options ${OPTIONS[*]}"
    } > "$out.stamp"
    echo "$out: $(stat -c %s "$out") bytes (${TARGETS[*]}), nvcc $NVCC_VERSION"
    built=$((built + 1))
done
# a fatbin whose source is gone would ship dead code
for f in "$DIR"/*.fatbin; do
    [ -f "${f%.fatbin}.cu" ] || { rm -f "$f" "$f.stamp"; echo "removed $f (no ${f%.fatbin}.cu)"; }
done
[ "$built" -gt 0 ] || { echo "build-cuda-kernels: no .cu file in $DIR" >&2; exit 1; }
