#!/usr/bin/env bash
# The one device-check script for every Pallas kernel of jaxkit (keep it under 6 minutes).
#
# Each kernel has a check module kernels/device_checks/<kernel>.py that compares its Pallas
# kernel with the jnp reference (values and gradients), times it against the reference and
# XLA baselines, and writes JSON rows; table.py prints all rows as one table.
#
#   kernels/run_device_checks.sh [--interpret] [--out DIR]
#
# On a GPU machine run it without flags. --interpret is the CPU dry run (Pallas interpret
# mode, tiny shapes) that checks the script itself. To add a kernel, add one line to
# MODULES with its module name and its time budget in seconds. Besides the Pallas kernels,
# two modules time hot loops on the same device: wedlm (the WeDLM decode loop, tokens/s vs
# AR + KV cache) and soft_pav (soft PAV sort/rank at n = 1e4-1e5, fwd+bwd vs a hard sort);
# splat times the Gaussian rasterizer's fwd+bwd (tiled vs dense path, no Pallas kernel).
# Each module runs under `timeout BUDGET` with DEVICE_CHECK_BUDGET_S=BUDGET in its
# environment (modules that read it start no case past the budget and keep their rows).
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
OUT="out/device_checks"
FLAGS=()
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --interpret) FLAGS+=(--interpret); DRY=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

# module  budget_s   (the budgets sum to 340 s, leaving 20 s of the 6 minutes for start-up and
# the table; tests/kernels/test_device_checks.py checks the sum; the --interpret dry run on a
# CPU, where compiling dominates and a shared machine can be 10x slower, runs without them:
# it checks the script, not the speed)
# (wbmm gave 25 s to sampling (Triton compile times) and wedlm (issue #14's batch-1 sampled
# and hard-text cases); its rows up to 14x14x320 w7 are recorded in kernels/README.md)
MODULES=(
  "wbmm 95"
  "sampling 80"
  "wedlm 70"
  "soft_pav 55"
  "splat 40"
)

STATUS=0
FILES=()
for entry in "${MODULES[@]}"; do
  read -r mod budget <<<"$entry"
  LIMIT=(env DEVICE_CHECK_BUDGET_S="$budget" timeout "$budget")
  SHOW="budget ${budget}s"
  [ "$DRY" = 1 ] && LIMIT=(env) && SHOW="dry run, no time limit"
  echo "== $mod ($SHOW)" >&2
  "${LIMIT[@]}" "$PY" "kernels/device_checks/$mod.py" "${FLAGS[@]}" --out "$OUT/$mod.json" \
    > "$OUT/$mod.log" 2>&1 || { echo "   $mod exited with $? (see $OUT/$mod.log)" >&2; STATUS=1; }
  FILES+=("$OUT/$mod.json")
done

"$PY" kernels/device_checks/table.py "${FILES[@]}" | tee "$OUT/table.md" || STATUS=1
exit $STATUS
