#!/usr/bin/env bash
# Runs every native Go fuzz target of the module for FUZZTIME each, within
# an overall budget, for CI and for local use.
#
#   FUZZTIME      time per target (go test -fuzztime), default 10s
#   FUZZ_BUDGET   wall-clock budget for the whole run in seconds, default 600;
#                 targets that would start after it are skipped and listed
#   FUZZ_PARALLEL fuzzing workers per target (go test -parallel), default 2
#   FUZZ_MATCH    extended regexp on "package target"; only matching targets run
#
# Targets are found by grepping *_test.go for "func FuzzXxx(", so listing
# them compiles nothing. Exit status: 1 if any target failed (its new
# crasher is in the package's testdata/fuzz/FuzzXxx/, to commit as a seed
# after the fix), else 0, also when the budget cut the run short.
set -uo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-10s}
budget=${FUZZ_BUDGET:-600}
par=${FUZZ_PARALLEL:-2}
match=${FUZZ_MATCH:-.}
module=$(go list -m)
start=$SECONDS
failed=()
skipped=()
ran=0
while IFS=: read -r file fn; do
  dir=$(dirname "$file")
  pkg="$module/${dir#./}"
  [ "$dir" = "." ] && pkg=$module
  echo "$pkg $fn" | grep -Eq -- "$match" || continue
  if (( SECONDS - start >= budget )); then
    skipped+=("$pkg $fn")
    continue
  fi
  echo "== $pkg $fn ($t)"
  # -timeout bounds one target even if a worker hangs past the fuzz time.
  if ! go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" -parallel "$par" -timeout 15m "$pkg"; then
    failed+=("$pkg $fn")
  fi
  ran=$((ran + 1))
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' . \
           | grep -v '^./tools/' | sed -E 's/func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort)
echo "fuzz: ran $ran targets in $((SECONDS - start))s"
if (( ${#skipped[@]} > 0 )); then
  echo "fuzz: budget of ${budget}s reached; skipped ${#skipped[@]}:"
  printf '  %s\n' "${skipped[@]}"
fi
if (( ${#failed[@]} > 0 )); then
  echo "fuzz: FAILED:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
