#!/usr/bin/env bash
# One call on a lent GPU machine (issue 38, item 8), from the repository root:
#   OUT=DIR bash benchmarks/gpu/lease_run.sh            # on the GPU (fits in ~9 minutes)
#   OUT=DIR DEVICE=cpu bash benchmarks/gpu/lease_run.sh # the same steps on the CPU, tiny shapes
# 1. the card and the software (nvidia-smi, torch);
# 2. a per-op profile of one fused pack step against the trial alone (pack_step_profile.py);
# 3. GPU check 5 (fusion: the engine ratios and the fused study), --quick;
# 4. GPU check 4 (the SP3-like co-location study), --quick, in what time is left.
# Writes at most 8 files under $OUT (what a lent machine sends back): card.txt, profile.json,
# check5.json, check5.md, check4.json, check4.md, log.txt. Each step has its own limit, so a slow
# or failing step loses only itself.
set -u
OUT=${OUT:?set OUT to a folder}
DEVICE=${DEVICE:-cuda}
S5=${S5:-330}      # seconds for check 5 (its own part limits inside)
S4=${S4:-150}      # seconds for check 4
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
exec > >(tee -a "$OUT/log.txt") 2>&1
WORK=$(mktemp -d /tmp/lease.XXXX)
TINY=""; DEV=""
if [ "$DEVICE" = cpu ]; then TINY="--tiny"; DEV="--device cpu"; fi

echo "== 1. card $(date -u +%FT%TZ)"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv 2>&1 || true
  $PY -c "import sys, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0]); print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"
  nproc; } | tee "$OUT/card.txt"

echo "== 2. profile of one pack step $(date -u +%T)"
timeout 150 $PY benchmarks/gpu/pack_step_profile.py --device "$DEVICE" $TINY --n 32 --steps 5 \
    --json "$OUT/profile.json" 2>&1 | grep -v USDT || echo "profile: exit $?"

echo "== 3. check 5 $(date -u +%T)"
timeout $((S5 + 20)) $PY benchmarks/gpu/gpu_suite.py --out "$WORK/s5" --quick $TINY $DEV \
    --only 5 --limit 5=$S5 || echo "check 5: exit $?"
cp "$WORK/s5/gpu_results.json" "$OUT/check5.json" 2>/dev/null
cp "$WORK/s5/gpu_results.md" "$OUT/check5.md" 2>/dev/null

echo "== 4. check 4 $(date -u +%T)"
timeout $((S4 + 20)) $PY benchmarks/gpu/gpu_suite.py --out "$WORK/s4" --quick $TINY $DEV \
    --only 4 --limit 4=$S4 || echo "check 4: exit $?"
cp "$WORK/s4/gpu_results.json" "$OUT/check4.json" 2>/dev/null
cp "$WORK/s4/gpu_results.md" "$OUT/check4.md" 2>/dev/null
echo "== done $(date -u +%T)"
cat "$OUT/check5.md" "$OUT/check4.md" 2>/dev/null | tail -40
