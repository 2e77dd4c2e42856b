#!/usr/bin/env bash
# One call on a lent GPU machine (issue 38, item 8), from the repository root:
#   OUT=DIR bash benchmarks/gpu/lease_run.sh            # on the GPU (fits in ~9 minutes)
#   OUT=DIR DEVICE=cpu bash benchmarks/gpu/lease_run.sh # the same steps on the CPU, tiny shapes
# 1. the card and the software (nvidia-smi, torch);
# 2. GPU check 5 (fusion: the engine ratios and the fused study), --quick;
# 3. (check 5 first: its goals are the issue's) then a per-op profile of one fused pack step
#    against the trial alone (pack_step_profile.py);
# 4. GPU check 4 (the SP3-like co-location study), --quick, in what time is left.
# Worst case about 10 minutes with the defaults (S5=260, SP=90, S4=100): each suite run gets its
# limit plus 60 s (the detect check, the 15 s stop grace, the report).
# Writes at most 8 files under $OUT (what a lent machine sends back): card.txt, profile.json,
# check5.json, check5.md, check4.json, check4.md, log.txt. Each step has its own limit, so a slow
# or failing step loses only itself.
set -u
OUT=${OUT:?set OUT to a folder}
DEVICE=${DEVICE:-cuda}
S5=${S5:-260}      # seconds for check 5 (its own part limits inside)
S4=${S4:-100}      # seconds for check 4
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
  nproc
  $PY -c "import hypersack.fusion.stack, hypersack.runtime.worker.entry, hypersack.study; print('hypersack imports')" 2>&1 | tail -3; } | tee "$OUT/card.txt"

echo "== 2. check 5 $(date -u +%T)"
timeout $((S5 + 60)) $PY benchmarks/gpu/gpu_suite.py --out "$WORK/s5" --quick $TINY $DEV \
    --only 5 --limit 5=$S5 || echo "check 5: exit $?"
cp "$WORK/s5/gpu_results.json" "$OUT/check5.json" 2>/dev/null
cp "$WORK/s5/gpu_results.md" "$OUT/check5.md" 2>/dev/null
[ -f "$OUT/check5.json" ] || cp "$(find "$WORK/s5" -name partial.json | head -1)" "$OUT/check5-partial.json" 2>/dev/null

echo "== 3. profile of one pack step $(date -u +%T)"
timeout ${SP:-90} $PY benchmarks/gpu/pack_step_profile.py --device "$DEVICE" $TINY --n 32 --steps 5 \
    --json "$OUT/profile.json" 2>&1 | grep -v USDT || echo "profile: exit $?"

echo "== 4. check 4 $(date -u +%T)"
timeout $((S4 + 60)) $PY benchmarks/gpu/gpu_suite.py --out "$WORK/s4" --quick $TINY $DEV \
    --only 4 --limit 4=$S4 || echo "check 4: exit $?"
cp "$WORK/s4/gpu_results.json" "$OUT/check4.json" 2>/dev/null
cp "$WORK/s4/gpu_results.md" "$OUT/check4.md" 2>/dev/null
echo "== done $(date -u +%T)"
cat "$OUT/check5.md" "$OUT/check4.md" 2>/dev/null | tail -40
