package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableFloat: table output shows six significant digits, trailing
// zeros dropped; csv and json keep every digit (TestFirstHourCLI).
func TestTableFloat(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{0.27109374999999997, "0.271094"},
		{1.0 / 3, "0.333333"},
		{-0.5, "-0.5"},
		{2.0, "2"},
		{0.0, "0"},
		{math.Copysign(0, -1), "0"},
		{-1e-12, "-1e-12"},
		{1.5e-7, "1.5e-07"},
		{0.00012345678, "0.000123457"},
		{1234567.891, "1234568"},
		{123456789012345.0, "123456789012345"},
		{2e20, "2e+20"},
		{math.NaN(), "nan"},
		{math.Inf(-1), "-inf"},
		{float32(0.1), "0.1"},
		{int64(3), ""},
		{"0.27109374999999997", ""},
	} {
		require.Equal(t, tc.want, tableFloat(tc.in), "%#v", tc.in)
	}
}

// TestFirstHourCLI covers what a new user meets in the first hour:
// round's sentence says whether a round regenerates; sql names the run's
// tables when a query names another; table output rounds doubles while
// csv and json keep them whole; config show --run prints the run's
// pinned config, not this invocation's.
func TestFirstHourCLI(t *testing.T) {
	o := newOpsEnv(t)
	// small.yaml regenerates every 2 rounds: round 1 regenerates, round 2
	// plays the pool carried forward.
	out := o.must(t, nil, "round", "1")
	require.Contains(t, out, "round 1 of run default committed (round id ")
	require.Contains(t, out, "), regeneration round (regenerate_every = 2): ran [")
	out = o.must(t, nil, "round", "2")
	require.Contains(t, out, "), pool round (no regeneration: regenerate_every = 2): ran [rollout label memory pool grpo metrics]")

	t.Run("sql unknown table", func(t *testing.T) {
		r := o.spade(t, nil, "sql", "select * from nosuch")
		require.Equal(t, exitFailure, r.code, r.stderr)
		require.Contains(t, r.stderr, "Table with name nosuch does not exist! The tables of run default are: ")
		require.Contains(t, r.stderr, ", labels, ")
		require.Contains(t, r.stderr, "(a table with no committed round has no view).")
		// DuckDB's own suggestion names its catalog, not the run.
		require.NotContains(t, r.stderr, "pg_")
		// A misspelt run table keeps DuckDB's suggestion, which is one.
		r = o.spade(t, nil, "sql", "select * from lables")
		require.Equal(t, exitFailure, r.code, r.stderr)
		require.Contains(t, r.stderr, `Did you mean "labels"?`)
		require.Contains(t, r.stderr, "The tables of run default are: ")
	})

	t.Run("float precision", func(t *testing.T) {
		q := "select 0.27109374999999997::double a, 1/3 b, 2.0::double c, 1.5e-7::double d, 'x' e"
		require.Equal(t, "a         b         c  d        e\n0.271094  0.333333  2  1.5e-07  x\n", o.must(t, nil, "sql", q))
		require.Equal(t, "a,b,c,d,e\n0.27109374999999997,0.3333333333333333,2,1.5e-7,x\n", o.must(t, nil, "sql", "--format", "csv", q))
		var row map[string]any
		require.NoError(t, json.Unmarshal([]byte(o.must(t, nil, "sql", "--format", "json", q)), &row))
		require.Equal(t, 0.27109374999999997, row["a"])
		require.Equal(t, 1.0/3, row["b"])
	})

	t.Run("config show --run", func(t *testing.T) {
		// Without --config: this invocation has the defaults
		// (regenerate_every 4), the run pinned small.yaml's 2.
		bare := func(args ...string) result {
			return spade(t, o.dir, nil, append([]string{"--store", o.store}, args...)...)
		}
		r := bare("config", "show")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "regenerate_every = 4  (default; ")
		r = bare("--run", "default", "config", "show")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "# the pinned config of run default (default/_RUN.json), the one its rounds are made with\n")
		require.Contains(t, r.stdout, "# this invocation's config (defaults, --config, SPADE_*) differs from it")
		require.Contains(t, r.stdout, "regenerate_every = 2  (run; env SPADE_REGENERATE_EVERY)\n")
		require.Contains(t, r.stdout, "seed = 11  (run; ")
		// The digest shown is the run's.
		var rf struct {
			ConfigDigest string `json:"config_digest"`
		}
		b, err := os.ReadFile(filepath.Join(o.dir, "runs", "default", "_RUN.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &rf))
		require.Contains(t, r.stdout, "# config digest = "+rf.ConfigDigest+"\n")
		// SPADE_RUN names the run too; JSON carries the source.
		r = spade(t, o.dir, []string{"SPADE_RUN=default"}, "--store", o.store, "config", "show", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var rows []struct{ Key, Value, Source string }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
		found := false
		for _, row := range rows {
			require.Equal(t, "run", row.Source, row.Key)
			if row.Key == "regenerate_every" {
				found = true
				require.Equal(t, "2", row.Value)
			}
		}
		require.True(t, found)
		// With the run's own config there is no difference to report.
		out := o.must(t, nil, "--run", "default", "config", "show")
		require.NotContains(t, out, "differs")
		// A run that does not exist yet: this invocation's config.
		r = bare("--run", "fresh", "config", "show")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "# run fresh does not exist yet: this invocation's config, which its first round would pin\n")
		require.Contains(t, r.stdout, "regenerate_every = 4  (default; ")
		require.False(t, strings.Contains(r.stdout, "(run; "))
	})
}
