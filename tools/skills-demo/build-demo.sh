#!/usr/bin/env bash
# Builds the skills demo (docs/SKILLS_DEMO.md) from what the repository ships: models/default.cmf plus three skills
# merged from the LoRA adapters in models/skills-demo/ (Python docs, man pages, GNU info manuals; trained on the H200),
# each with a routing subspace fitted to its domain's prompts, the router calibrated, the file compacted (~39.5 MB).
#     tools/skills-demo/build-demo.sh [OUT]          (default: models/skills-demo.cmf, ignored by git)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/models/skills-demo.cmf}
demo=$root/models/skills-demo
cp "$root/models/default.cmf" "$out.part"
trap 'rm -f "$out.part"' EXIT
add() { "$root/cmf" skill add "$out.part" --lora "$demo/$1" --id "$1" --name "$2" --prompts "$demo/$1.prompts.fit.txt" --rank 4; }
add python "Python docs"
add man "man pages"
add info "GNU info manuals"
"$root/cmf" skill calibrate "$out.part"
"$root/cmf" compact "$out.part"
mv "$out.part" "$out"
trap - EXIT
echo "wrote $out: try  ./cmf route $out -p 'The -r option copies directories recursively.'  and  ./cmf run $out --skill auto -p 'import json'"
