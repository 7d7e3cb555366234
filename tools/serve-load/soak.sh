#!/usr/bin/env bash
# A soak of a running OpenAI-compatible server: rounds of C streaming clients (serve_load.py) for MINUTES minutes,
# one line per round with the errors and the server's resident memory (ps RSS of PID), then a summary.
#   tools/serve-load/soak.sh URL PID [MINUTES=30] [CLIENTS=32] [MAX_TOKENS=64]
set -euo pipefail
url=$1 pid=$2 minutes=${3:-30} clients=${4:-32} max=${5:-64}
here=$(cd "$(dirname "$0")" && pwd)
end=$(( $(date +%s) + 60 * minutes )) round=0 errors=0 tokens=0
rss() { ps -o rss= -p "$pid" | tr -d ' '; }
echo "start rss_kib=$(rss)"
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  out=$(python3 "$here/serve_load.py" --url "$url" --concurrency "$clients" --requests 2 --max-tokens "$max" --warmup 0 --json)
  e=$(python3 -c "import json,sys;r=json.loads(sys.argv[1])[0];print(r['errors'], r['tokens'], round(r['tokens_per_s'],1), round(r['ttft_ms_p99']), round(r['itl_ms_p99'],1))" "$out")
  set -- $e
  errors=$((errors + $1)); tokens=$((tokens + $2))
  echo "round $round $(date +%T) errors=$1 tokens=$2 tok/s=$3 ttft_p99_ms=$4 itl_p99_ms=$5 rss_kib=$(rss)"
done
echo "end rounds=$round errors=$errors tokens=$tokens rss_kib=$(rss)"
