#!/usr/bin/env bash
# On the H200: self-test of the fixture models (background, while the CPU generates; also with every prompt through
# cuBLAS), cuBLAS GEMM bound, llama-8b random weights generated, converted to q8_2f and bf16, `cmf bench --device cuda`
# tg128 / pp512, pp512 again with -Dcmf.cuda.prefillPrecision=fast, a decode profile. Knobs: QUANTS, SELFTEST_QUANTS,
# PRESET, P, N, R, DEV, W.
set -uo pipefail
G=$(cd "$(dirname "$0")/.." && pwd)
source "$G/env.sh"
JV="java --add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED"
J="$JV -jar $G/cmf.jar"
O=${OUT:-/tmp/out}; mkdir -p "$O"
W=${W:-/tmp/l8b}; PRESET=${PRESET:-llama-8b}; P=${P:-512}; N=${N:-128}; R=${R:-3}; DEV=${DEV:-cuda}
log() { echo "[$(date +%T)] $*" | tee -a "$O/log.txt"; }
log "start $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null) cores $(nproc)"
( cd "$G" && timeout 300 $J selftest --device $DEV --fixtures fixtures --quant ${SELFTEST_QUANTS:-q8_2f,bf16,f16} > "$O/selftest.txt" 2>&1; echo "selftest rc=$?" >> "$O/selftest.txt"
  # every fixture prompt through cuBLAS too (chunks of >= 16 tokens take it anyway; the fixtures' are shorter)
  timeout 300 $JV -Dcmf.cuda.gemmMinTokens=2 -jar $G/cmf.jar selftest --device $DEV --fixtures fixtures --quant ${SELFTEST_QUANTS:-q8_2f,bf16,f16} > "$O/selftest-gemm.txt" 2>&1; echo "selftest rc=$?" >> "$O/selftest-gemm.txt"
  timeout 120 python3 "$G/b8/gemm_bound.py" $P > "$O/gemm_bound.json" 2>>"$O/log.txt" ) &
t0=$(date +%s); timeout 300 python3 "$G/b8/gen_parallel.py" --preset $PRESET --out $W --max-shard-gb 1 >>"$O/log.txt" 2>&1; log "generated rc=$? in $(( $(date +%s) - t0 )) s"
wait; log "selftest: $(grep -h checks $O/selftest.txt $O/selftest-gemm.txt | tr '\n' ' ')"
for q in ${QUANTS:-q8_2f bf16}; do
  t0=$(date +%s); timeout 200 $J convert $W -o $W-$q.cmf -q $q --progress none -f >>"$O/log.txt" 2>&1; log "converted $q rc=$? in $(( $(date +%s) - t0 )) s, $(stat -c %s $W-$q.cmf) bytes"
  timeout 150 $J bench $W-$q.cmf --device $DEV -p $P -n $N -r $R --json > "$O/bench-$q.json" 2>>"$O/log.txt"; log "bench $q rc=$? $(cat $O/bench-$q.json)"
  # the same prefill with f16-level activations (-Dcmf.cuda.prefillPrecision=fast), decode unaffected so not rerun
  timeout 100 $JV -Dcmf.cuda.prefillPrecision=fast -jar $G/cmf.jar bench $W-$q.cmf --device $DEV -p $P -n 0 -r $R --json > "$O/bench-$q-fast.json" 2>>"$O/log.txt"; log "bench $q fast rc=$? $(cat $O/bench-$q-fast.json)"
  if [ "$q" = q8_2f ]; then timeout 60 $JV -Dcmf.cuda.profile=true -jar $G/cmf.jar bench $W-$q.cmf --device $DEV -p 0 -n 16 -r 1 > "$O/profile-$q.txt" 2>&1; log "profile rc=$?"; fi
  rm -f $W-$q.cmf
done
log done
