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
# MODULES with its module name and its time budget in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
OUT="out/device_checks"
FLAGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --interpret) FLAGS+=(--interpret); shift ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

# module  budget_s   (the budgets sum to under 6 minutes)
MODULES=(
  "wbmm 180"
  "sampling 150"
)

STATUS=0
FILES=()
for entry in "${MODULES[@]}"; do
  read -r mod budget <<<"$entry"
  echo "== $mod (budget ${budget}s)" >&2
  timeout "$budget" "$PY" "kernels/device_checks/$mod.py" "${FLAGS[@]}" --out "$OUT/$mod.json" \
    > "$OUT/$mod.log" 2>&1 || { echo "   $mod exited with $? (see $OUT/$mod.log)" >&2; STATUS=1; }
  FILES+=("$OUT/$mod.json")
done

"$PY" kernels/device_checks/table.py "${FILES[@]}" | tee "$OUT/table.md" || STATUS=1
exit $STATUS
