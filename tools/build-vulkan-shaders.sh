#!/usr/bin/env bash
# Builds every Vulkan compute shader of the engine, cmf-engine/src/main/resources/dev/cmf4j/backend/vulkan/NAME.comp
# (GLSL), into NAME.spv next to it (SPIR-V, committed and shipped in the jar; the engine has no shader compiler at run
# time), and writes NAME.spv.stamp recording the SHA-256 of the exact source it was built from. The CI test
# ShippedShadersTest fails when a stamp does not match its source.
#
# Run it after every edit of a .comp file, then commit the .comp, .spv and .spv.stamp together:
#     tools/build-vulkan-shaders.sh            (needs glslc: Debian/Ubuntu apt-get install glslc; GLSLC=/path/to/glslc)
#     tools/build-vulkan-shaders.sh NAME...    (only those shaders, whatever their stamps say)
# Without names it rebuilds the shaders whose stamp does not match their source and .spv (FORCE=1: every one), so an
# older glslc leaves the shaders it cannot compile alone: matmul_coop.comp needs GL_KHR_cooperative_matrix (shaderc
# 2023.8 or newer; docs/VULKAN.md says how to run Debian trixie's glslc on bookworm).
#
# Target: Vulkan 1.1 SPIR-V (1.3), the oldest the backend opens, so every device from lavapipe to NVIDIA's runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=cmf-engine/src/main/resources/dev/cmf4j/backend/vulkan
GLSLC=${GLSLC:-glslc}
OPTIONS=(--target-env=vulkan1.1 -O)

command -v "$GLSLC" >/dev/null || { echo "build-vulkan-shaders: glslc not found (apt-get install glslc, or set GLSLC=/path/to/glslc)" >&2; exit 1; }
GLSLC_VERSION=$("$GLSLC" --version | sed -n 1p)   # sed reads it all: head would end the pipe early (SIGPIPE)

# the hash the engine's test compares: the source bytes with carriage returns dropped (a CRLF checkout stays fresh)
sha() { tr -d '\r' < "$1" | sha256sum | cut -d' ' -f1; }

# whether NAME.spv.stamp records NAME.comp's hash and NAME.spv's
fresh() {
    local stamp="$DIR/$1.spv.stamp"
    [ -f "$stamp" ] && [ -f "$DIR/$1.spv" ] \
        && grep -qx "source-sha256 $(sha "$DIR/$1.comp")" "$stamp" \
        && grep -qx "spv-sha256 $(sha256sum "$DIR/$1.spv" | cut -d' ' -f1)" "$stamp"
}

shopt -s nullglob
built=0
if [ $# -gt 0 ]; then
    sources=()
    for n in "$@"; do
        [ -f "$DIR/$n.comp" ] || { echo "build-vulkan-shaders: no $DIR/$n.comp" >&2; exit 1; }
        sources+=("$DIR/$n.comp")
    done
else
    sources=("$DIR"/*.comp)
fi
for src in "${sources[@]}"; do
    name=$(basename "$src" .comp)
    out="$DIR/$name.spv"
    if [ $# -eq 0 ] && [ "${FORCE:-0}" != 1 ] && fresh "$name"; then
        echo "$out: up to date"
        built=$((built + 1))
        continue
    fi
    tmp=$(mktemp "$DIR/.$name.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    "$GLSLC" "${OPTIONS[@]}" -o "$tmp" "$src"
    mv "$tmp" "$out"
    trap - EXIT
    {
        echo "# Written by tools/build-vulkan-shaders.sh: what $name.spv was built from. Do not edit; rerun the script."
        echo "source $name.comp"
        echo "source-sha256 $(sha "$src")"
        echo "spv-sha256 $(sha256sum "$out" | cut -d' ' -f1)"
        echo "glslc $GLSLC_VERSION"
        echo "options ${OPTIONS[*]}"
    } > "$out.stamp"
    echo "$out: $(stat -c %s "$out") bytes, $GLSLC_VERSION"
    built=$((built + 1))
done
# a .spv whose source is gone would ship dead code
for f in "$DIR"/*.spv; do
    [ -f "${f%.spv}.comp" ] || { rm -f "$f" "$f.stamp"; echo "removed $f (no ${f%.spv}.comp)"; }
done
[ "$built" -gt 0 ] || { echo "build-vulkan-shaders: no .comp file in $DIR" >&2; exit 1; }
