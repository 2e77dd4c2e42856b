#!/usr/bin/env bash
# One call on a lent GPU machine (issue 38, item 8), from the repository root:
#   OUT=DIR bash benchmarks/gpu/lease_run.sh            # on the GPU (under 8 minutes)
#   OUT=DIR DEVICE=cpu bash benchmarks/gpu/lease_run.sh # the same steps on the CPU, tiny shapes
# 1. the card and the software (nvidia-smi, torch);
# 2. the A/B of the fused convolution's two forms (StackOptions.conv: "grouped", one grouped
#    convolution, against "bmm", im2col + one batched GEMM over the members), bf16, N = 32:
#    a per-op profile of one pack step of each against the trial alone (pack_step_profile.py),
#    then each with and without a CUDA graph (graph_probe.py; also shows whether MobileNet's
#    step now captures after ResNet-18's graphs are gone);
# 3. GPU check 5 (fusion: the engine ratios and the fused study), --quick;
# 4. GPU check 4 (the SP3-like co-location study), --quick, in what time is left.
# The whole call ends within TOTAL seconds (default 470, under 8 minutes): each step's limit is
# its own (SP, SG, S5, S4) or what is left, and a step with too little left is skipped. A
# suite run gets its limit plus 60 s (the detect check, the 15 s stop grace, the report).
# Writes at most 8 files under $OUT (what a lent machine sends back): card.txt, profile.json,
# probe.json, check5.json (or check5-partial.json), check5.md, check4.json, check4.md, log.txt.
set -u
OUT=${OUT:?set OUT to a folder}
DEVICE=${DEVICE:-cuda}
TOTAL=${TOTAL:-470}  # seconds for the whole call
SP=${SP:-100}        # the profile A/B
SG=${SG:-90}         # the graph probe A/B
S5=${S5:-150}        # check 5 (its own part limits inside)
S4=${S4:-120}        # check 4 (bounded by what is left of TOTAL)
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
exec > >(tee -a "$OUT/log.txt") 2>&1
WORK=$(mktemp -d /tmp/lease.XXXX)
TINY=""; DEV=""
if [ "$DEVICE" = cpu ]; then TINY="--tiny"; DEV="--device cpu"; fi
START=$(date +%s)

# limit WANT EXTRA: WANT, or what is left of TOTAL less EXTRA; 0 when under 20 s would remain
limit() {
  local left=$(( TOTAL - ($(date +%s) - START) - $2 ))
  local got=$(( $1 < left ? $1 : left ))
  if [ "$got" -lt 20 ]; then echo 0; else echo "$got"; fi
}

echo "== 1. card $(date -u +%FT%TZ)"
{ timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv 2>&1 || true
  $PY -c "import sys, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0]); print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"
  nproc
  $PY -c "import hypersack.fusion.stack, hypersack.runtime.worker.entry, hypersack.study; print('hypersack imports')" 2>&1 | tail -3; } | tee "$OUT/card.txt"

L=$(limit "$SP" 0)
echo "== 2a. conv A/B: profile of one pack step, ${L} s $(date -u +%T)"
if [ "$L" -gt 0 ]; then
  timeout "$L" $PY benchmarks/gpu/pack_step_profile.py --device "$DEVICE" $TINY --n 32 \
      --steps 3 --warmup 3 --precisions bf16 --conv grouped,bmm \
      --json "$OUT/profile.json" 2>&1 | grep -v USDT || echo "profile: exit $?"
fi

L=$(limit "$SG" 0)
echo "== 2b. conv A/B with and without a CUDA graph, ${L} s $(date -u +%T)"
if [ "$L" -gt 0 ]; then
  timeout "$L" $PY benchmarks/gpu/graph_probe.py --device "$DEVICE" $TINY --n 32 --steps 5 \
      --conv grouped,bmm --json "$OUT/probe.json" || echo "graph probe: exit $?"
fi

# check N of the suite in L s (+60 s to stop and write its report); its JSON/MD (or the partial
# JSON a cut run leaves) go to $OUT as checkN.*
suite_check() {
  local n=$1 L=$2
  echo "== $((n == 5 ? 3 : 4)). check $n, ${L} s $(date -u +%T)"
  [ "$L" -gt 0 ] || return 0
  timeout $((L + 60)) $PY benchmarks/gpu/gpu_suite.py --out "$WORK/s$n" --quick $TINY $DEV \
      --only "$n" --limit "$n=$L" || echo "check $n: exit $?"
  cp "$WORK/s$n/gpu_results.json" "$OUT/check$n.json" 2>/dev/null
  cp "$WORK/s$n/gpu_results.md" "$OUT/check$n.md" 2>/dev/null
  [ -f "$OUT/check$n.json" ] || cp "$(find "$WORK/s$n" -name partial.json | head -1)" \
      "$OUT/check$n-partial.json" 2>/dev/null
  return 0
}
suite_check 5 "$(limit "$S5" 60)"
suite_check 4 "$(limit "$S4" 60)"
echo "== done in $(( $(date +%s) - START )) s $(date -u +%T)"
cat "$OUT/check5.md" "$OUT/check4.md" 2>/dev/null | tail -40
