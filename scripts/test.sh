#!/usr/bin/env bash
# The whole test suite: bootstrap (with test servers), lint, typecheck, then vitest, pytest and cargo test.
# Exits non-zero on any failure; prints each runner's summary lines.
set -uo pipefail
cd "$(dirname "$0")/.."
t_boot=$SECONDS
scripts/bootstrap.sh --tests || exit 1
TIMES=("bootstrap $((SECONDS - t_boot))s")
CACHE=${HANZO_ML_CACHE:-$HOME/.cache/hanzo-ml}
PY=$(node -e 'console.log(require("./.bootstrap.json").python)')
export CARGO_TARGET_DIR="$CACHE/cargo-target"
failed=()

step() {
  local name=$1; shift
  printf '\n=== %s ===\n' "$name"
  local t0=$SECONDS
  "$@" || failed+=("$name")
  TIMES+=("$name $((SECONDS - t0))s")
}

step lint npx eslint .
step typecheck npx tsc --noEmit
step "typecheck (console)" npx tsc --noEmit -p console
step "rust tests (cargo test)" bash -c 'cd candle && cargo test --quiet 2>&1'
step "python tests (pytest)" bash -c "cd trainer && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 '$PY' -m pytest -q -p no:cacheprovider"
rm -f .vitest-results.json
step "typescript tests (vitest)" npx vitest run --reporter=default --reporter=json --outputFile.json=.vitest-results.json
# vitest's own summary is not a line CI runners read: print the plain "N passed, N failed" one too.
[ -f .vitest-results.json ] && npx tsx scripts/vitest-summary.ts .vitest-results.json

printf '\nphase times: %s\n' "$(IFS=,; echo "${TIMES[*]}" | sed 's/,/, /g')"
printf '\n'
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "all test suites passed"
