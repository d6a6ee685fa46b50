#!/usr/bin/env bash
# demo.sh: the CPU learning recipe end to end (`make demo`; docs/recipes.md,
# "Learning on a CPU"). Imports the learnable pool as round 0 of the run,
# scores the base model with `spade eval --round 0`, runs DEMO_ROUNDS rounds
# of configs/learn-cpu.yaml (each serves the previous round's checkpoint,
# plays the four games, trains the agent and, in its eval stage, scores
# the new checkpoint on held-out seeds), printing each round's unhinted
# win rate and held-out score, and writes the report.
#
# Settings (environment):
#   DEMO_ROUNDS  rounds to run (default 5)
#   DEMO_RUN     run name (default learn-cpu); an existing run is continued
#   SPADE_STORE  store URL (default file://./runs, as spade's)
#   SPADE        the spade binary (default bin/spade)
# Needs `make build venv models` first (the Makefile's demo target runs them).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${DEMO_ROUNDS:-5}
run=${DEMO_RUN:-learn-cpu}
spade=${SPADE:-bin/spade}
cfg=configs/learn-cpu.yaml
sp() { "$spade" --config "$cfg" --run "$run" "$@"; }

case $rounds in '' | *[!0-9]*) echo "demo: DEMO_ROUNDS=$rounds is not a whole number" >&2; exit 2 ;; esac
if [ ! -d /opt/spade/cache/models/smollm2-135m-instruct ]; then
	echo "demo: /opt/spade/cache/models/smollm2-135m-instruct is missing: run make models" >&2
	exit 2
fi
# transformers serve answers HTTP 500 on /v1/models while its hub cache
# directory does not exist (the recipe's serve_command names it).
mkdir -p /opt/spade/cache/hf

start=$(date +%s)
if ! sp status --round 0 >/dev/null 2>&1; then
	sp pool import configs/pools/learnable
fi
eval0=$(sp eval --round 0 | tee /dev/stderr | grep learnable_games || true)
# The rounds already run (none in a new run: it has no metrics table yet).
done_rounds=$(sp sql "select coalesce(max(round), 0) from metrics" --format csv 2>/dev/null | tail -n 1) || done_rounds=0
for ((r = done_rounds + 1; r <= rounds; r++)); do
	t0=$(date +%s)
	sp round "$r"
	wr=$(sp sql "select round(value, 3) from metrics where round = $r and name = 'win_rate'" --format csv | tail -n 1)
	em=$(sp sql "select round(value, 3) from evals where round = $r and task = 'learnable_games'" --format csv | tail -n 1)
	echo "demo: round $r: unhinted win rate $wr, held-out exact match $em ($(($(date +%s) - t0)) s)"
done
echo "demo: round 0 (the base model), held-out exact match: ${eval0:-already evaluated (spade eval --round 0 --force prints it)}"
echo "demo: per round, the plays' unhinted win rate (temperature 0.7) and the new checkpoint's exact match on 40 held-out seeds (greedy):"
sp sql "select m.round, round(m.value, 3) as win_rate, round(e.value, 3) as held_out_exact_match from metrics m left join evals e on e.round = m.round and e.task = 'learnable_games' where m.name = 'win_rate' order by m.round" --format table
sp report --out "$run-report.html"
echo "demo: report written to $run-report.html; $(($(date +%s) - start)) s in all"
