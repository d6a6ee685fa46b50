package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/diff"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/stages/all"
)

var opsUpdate = flag.Bool("update", false, "rewrite golden files (testdata/ops/golden_digests.json)")

const opsGoldenPath = "testdata/ops/golden_digests.json"

// opsGolden is the golden digest file: every table's content digest of
// rounds 0..2 of the fixed-seed run of testdata/ops/small.yaml.
type opsGolden struct {
	Comment string            `json:"comment"`
	Config  string            `json:"config"`
	Rounds  int               `json:"rounds"`
	Digests map[string]string `json:"digests"`
}

// opsEnv is one store directory with the small ops config.
type opsEnv struct {
	dir   string
	store string
	cfg   string
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	cfg, err := filepath.Abs("testdata/ops/small.yaml")
	require.NoError(t, err)
	dir := t.TempDir()
	return &opsEnv{dir: dir, store: "file://" + filepath.Join(dir, "runs"), cfg: cfg}
}

func (o *opsEnv) args(store string, args []string) []string {
	return append([]string{"--store", store, "--config", o.cfg, "--log-level", "warn"}, args...)
}

// spade runs the binary against the env's store with extra environment.
func (o *opsEnv) spade(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return spade(t, o.dir, env, o.args(o.store, args)...)
}

// must runs spade and requires exit code 0.
func (o *opsEnv) must(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := o.spade(t, env, args...)
	require.Equal(t, 0, r.code, "%s", r)
	return r.stdout
}

func openStore(t *testing.T, url string) storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// sealDigests returns "round=NNNNNN/table" -> content digest for every
// table of rounds 0..last of run, from the round seals.
func sealDigests(t *testing.T, s storage.Store, run string, last int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for r := 0; r <= last; r++ {
		seal, err := pipeline.ReadSeal(context.Background(), s, run, r)
		require.NoError(t, err, "run %s round %d", run, r)
		for table, d := range seal.Tables {
			m, err := pipeline.ReadManifest(context.Background(), s, seal.Manifests[table])
			require.NoError(t, err)
			require.Equal(t, d, m.ContentDigest(), "seal and manifest of %s", seal.Manifests[table])
			out[fmt.Sprintf("round=%06d/%s", r, table)] = d
		}
	}
	return out
}

// compareDigests lists every table whose digest differs, is missing or is
// extra, sorted, in words a failing test prints.
func compareDigests(want, got map[string]string) []string {
	var out []string
	for k, w := range want {
		switch g, ok := got[k]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: missing (golden %.12s)", k, w))
		case g != w:
			out = append(out, fmt.Sprintf("%s: content digest %.12s, golden %.12s", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: not in the golden file (digest %.12s)", k, g))
		}
	}
	sort.Strings(out)
	return out
}

// readAllTables reads every row of every table of rounds 0..last of run
// through the manifests (sizes and sha256 verified) and returns the number
// of tables read.
func readAllTables(t *testing.T, s storage.Store, run string, last int) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for r := 0; r <= last; r++ {
		seal, err := pipeline.ReadSeal(ctx, s, run, r)
		require.NoError(t, err)
		for _, key := range seal.Manifests {
			m, err := pipeline.ReadManifest(ctx, s, key)
			require.NoError(t, err)
			var rows int64
			require.NoError(t, diff.ReadRows(ctx, s, m, func(reflect.Value) error { rows++; return nil }), key)
			require.Equal(t, m.Rows, rows, key)
			n++
		}
	}
	return n
}

func onlyRounds(d map[string]string, last int) map[string]string {
	out := map[string]string{}
	for k, v := range d {
		var r int
		if _, err := fmt.Sscanf(k, "round=%06d/", &r); err == nil && r <= last {
			out[k] = v
		}
	}
	return out
}

// TestOps runs a fixed-seed two-round base run once and checks, against
// it: the golden digests, diff, fork + gc, sharded stages in separate
// processes, the lease of `round next`, and a whole round on S3.
func TestOps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs full rounds in subprocesses")
	}
	o := newOpsEnv(t)
	o.cfg = opsLoadProofConfig(t, o.cfg)
	o.must(t, nil, "round", "1", "--run", "base")
	o.must(t, nil, "round", "2", "--run", "base")
	local := openStore(t, o.store)
	base := sealDigests(t, local, "base", 2)

	t.Run("golden digests", func(t *testing.T) { opsGoldenDigests(t, o, base) })

	// A fork with another seed re-runs round 2 only: the comparison with
	// the golden file must name exactly round 2's changed tables.
	reseed := []string{"SPADE_SEED=12"}
	o.must(t, reseed, "fork", "base", "--round", "1", "reseeded")
	o.must(t, reseed, "round", "2", "--run", "reseeded")

	t.Run("golden comparison names the changed tables", func(t *testing.T) { opsGoldenComparisonNamesTheChangedTables(t, local) })

	t.Run("report uses the run's config", func(t *testing.T) { opsReportUsesTheRunSConfig(t, o, base) })

	t.Run("diff", func(t *testing.T) { opsDiff(t, o) })

	t.Run("fork continues identically and gc keeps every table readable", func(t *testing.T) { opsForkContinuesIdenticallyAndGcKeepsEveryTableReadable(t, o, local, base, reseed) })

	t.Run("sharded stages in separate processes", func(t *testing.T) { opsShardedStagesInSeparateProcesses(t, o, local, base) })

	t.Run("round next holds the lease", func(t *testing.T) { opsRoundNextHoldsTheLease(t, o, local) })

	t.Run("whole round on S3 equals the local round", func(t *testing.T) { opsWholeRoundOnS3EqualsTheLocalRound(t, o, base) })
}

// opsLoadProofConfig writes small.yaml (at path) with a sandbox call
// limit of 60 s into a temporary directory and returns its path. The
// committed rows depend on wall-clock limits: a reset or step that runs
// past sandbox.call_timeout_s (5 s by default) is killed and recorded as
// a play that ended in error (rollouts, labels, pool, ... change). The
// calls need milliseconds of CPU, but on the 2-core machine under load
// (go test ./... runs packages side by side, and the sharded subtest
// starts eight spade processes with two sandboxes each) a call can wait
// for the CPU past 5 s, and then digests differ for no fault of the code
// (as TestGCRace's 5 s limit once made one play differ): the likeliest
// cause of the one TestOps failure in seven runs under load that issue 41
// reports without its output. A 20 ms limit shows the mechanism: 35 of
// round 1's plays end in "timeout: no reply within 20ms" and eight
// tables differ. 60 s is far beyond any wait for the CPU, and the limit
// is no part of any table's content: with it the digests are the golden
// ones. When digests differ all the same, the failure lists the timeouts
// of the runs compared (opsTimeouts).
func opsLoadProofConfig(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(b), "\nsandbox:", "small.yaml has a sandbox section: set call_timeout_s there instead")
	p := filepath.Join(t.TempDir(), "small-60s.yaml")
	require.NoError(t, os.WriteFile(p, append(b, "\n# TestOps: a sandbox call limit no load reaches (opsLoadProofConfig)\nsandbox:\n  call_timeout_s: 60\n"...), 0o644))
	return p
}

// opsTimeouts lists the rows of runs (in store) that record a sandbox or
// model call that ran past its limit: plays that ended in a timeout error
// and validation checks that timed out, for a failure message ("none"
// when there are none).
func opsTimeouts(t *testing.T, o *opsEnv, store string, runs ...string) string {
	t.Helper()
	var out []string
	for _, run := range runs {
		for _, q := range []string{
			"SELECT 'rollouts', round, env_id, termination, error FROM rollouts WHERE error ILIKE '%timeout%' OR error ILIKE '%no reply within%' ORDER BY ALL LIMIT 20",
			"SELECT 'validations', round, env_id, \"check\", detail FROM validations WHERE detail ILIKE '%timeout%' OR detail ILIKE '%no reply within%' ORDER BY ALL LIMIT 20",
		} {
			r := spade(t, o.dir, nil, o.args(store, []string{"--run", run, "sql", "--format", "csv", q})...)
			if r.code != 0 {
				out = append(out, fmt.Sprintf("run %s: %s", run, r))
				continue
			}
			if _, rows, _ := strings.Cut(strings.TrimSpace(r.stdout), "\n"); rows != "" {
				out = append(out, "run "+run+":\n"+rows)
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "\n")
}

// opsRequireDigests requires got to equal want (table -> content digest),
// failing with the tables that differ and the timeouts of runs.
func opsRequireDigests(t *testing.T, o *opsEnv, store string, want, got map[string]string, what string, runs ...string) {
	t.Helper()
	if diffs := compareDigests(want, got); len(diffs) > 0 {
		require.Fail(t, what, "tables that differ:\n%s\nsandbox and model timeouts recorded in runs %v (a timeout under load changes rows without any fault of the code):\n%s",
			strings.Join(diffs, "\n"), runs, opsTimeouts(t, o, store, runs...))
	}
}

// opsGoldenDigests is TestOps' subtest "golden digests".
func opsGoldenDigests(t *testing.T, o *opsEnv, base map[string]string) {
	if *opsUpdate {
		g := opsGolden{
			Comment: "content digests of every table of rounds 0..2 of the fixed-seed run; rewrite with go test ./cmd/spade -run TestOps -update (docs/operations.md)",
			Config:  "testdata/ops/small.yaml", Rounds: 2, Digests: base,
		}
		b, err := json.MarshalIndent(g, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(opsGoldenPath, append(b, '\n'), 0o644))
	}
	golden := readGolden(t)
	require.Greater(t, len(golden.Digests), 20)
	opsRequireDigests(t, o, o.store, golden.Digests, base, "tables whose output changed; if the change is intended, run go test ./cmd/spade -run TestOps -update and commit testdata/ops/golden_digests.json", "base")
}

// opsGoldenComparisonNamesTheChangedTables is TestOps' subtest "golden comparison names the changed tables".
func opsGoldenComparisonNamesTheChangedTables(t *testing.T, local storage.Store) {
	golden := readGolden(t)
	diffs := compareDigests(golden.Digests, sealDigests(t, local, "reseeded", 2))
	require.NotEmpty(t, diffs)
	joined := strings.Join(diffs, "\n")
	require.Contains(t, joined, "round=000002/rollouts: content digest")
	for _, d := range diffs {
		require.True(t, strings.HasPrefix(d, "round=000002/"), "only round 2 differs: %s", d)
	}
	require.NotContains(t, joined, "round=000002/memory", "memory is carried by reference from round 1")
}

// opsReportUsesTheRunSConfig is TestOps' subtest "report uses the run's config".
func opsReportUsesTheRunSConfig(t *testing.T, o *opsEnv, base map[string]string) {
	// The invocation's band and k differ from the run's; the report
	// describes the run as it was made.
	out := filepath.Join(t.TempDir(), "r.html")
	o.must(t, []string{"SPADE_LABEL_BAND_LOW=0.1", "SPADE_REGENERATE_EVERY=1"}, "report", "--run", "base", "--out", out)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	html := string(b)
	require.Contains(t, html, "2 rounds (1 to 2), 1 with regeneration")
	require.Contains(t, html, "Learnable band: win rate in [0.2, 0.8].")
	require.NotContains(t, html, "[0.1, 0.8]")

	// A fork with another band: its round 1 is the base run's, labelled
	// with the base run's band, and the page says so.
	o.must(t, []string{"SPADE_LABEL_BAND_LOW=0.1"}, "fork", "base", "--round", "1", "banded")
	o.must(t, []string{"SPADE_LABEL_BAND_LOW=0.1"}, "round", "2", "--run", "banded")
	o.must(t, nil, "report", "--run", "banded", "--out", out)
	b, err = os.ReadFile(out)
	require.NoError(t, err)
	html = string(b)
	require.Contains(t, html, "Learnable band: win rate in [0.2, 0.8] (round 1), [0.1, 0.8] (round 2).")
	require.Contains(t, html, "share in band of its round")
	require.Contains(t, html, "2 rounds (1 to 2), 1 with regeneration")
}

// opsDiff is TestOps' subtest "diff".
func opsDiff(t *testing.T, o *opsEnv) {
	r := o.spade(t, nil, "diff", "base", "base")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "runs are equal")
	r = o.spade(t, nil, "diff", "base", "reseeded", "--round", "1")
	require.Equal(t, 0, r.code, "round 1 is shared by the fork: %s", r)
	r = o.spade(t, nil, "diff", "base", "reseeded")
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stdout, "round 2 rollouts: different")
	// A reader that goes away (spade diff | head) does not turn
	// "different" into exit 0, "equal".
	for _, format := range [][]string{nil, {"--json"}} {
		r = spadeClosedStdout(t, o.dir, nil, o.args(o.store, append([]string{"diff", "base", "reseeded", "--max-rows", "-1"}, format...))...)
		require.Equal(t, 1, r.code, "stdout closed, %v: %s", format, r)
	}
	r = spadeClosedStdout(t, o.dir, nil, o.args(o.store, []string{"diff", "base", "base", "--all"})...)
	require.Equal(t, 0, r.code, "%s", r)
	r = o.spade(t, nil, "diff", "base", "reseeded", "--round", "2", "--table", "rollouts", "--json")
	require.Equal(t, 1, r.code, "%s", r)
	var rep diff.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Tables, 1)
	td := rep.Tables[0]
	require.Equal(t, diff.StatusDifferent, td.Status)
	require.Positive(t, td.Changed)
	require.Contains(t, td.ChangedColumns, "seed")
	require.Equal(t, []string{"env_id", "hinted", "sample"}, []string{td.Rows[0].Key[0].Column, td.Rows[0].Key[1].Column, td.Rows[0].Key[2].Column})
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"one run", []string{"diff", "base"}, exitUsage},
		{"unknown table", []string{"diff", "base", "base", "--table", "nope"}, exitUsage},
		{"bad run name", []string{"diff", "base", "../x"}, exitUsage},
		// Every failure of diff is exit 2 (diff(1)'s "trouble"): exit 1
		// means the runs differ, and a mistyped name must not read so.
		{"missing run", []string{"diff", "base", "absent"}, exitUsage},
		{"missing first run", []string{"diff", "absent", "base"}, exitUsage},
		{"missing round", []string{"diff", "base", "base", "--round", "99"}, exitUsage},
		{"status past the next round", []string{"--run", "base", "status", "--round", "99"}, exitUsage},
		{"status negative round", []string{"--run", "base", "status", "--round", "-3"}, exitUsage},
		{"bad max rows", []string{"diff", "base", "base", "--max-rows", "-5"}, exitUsage},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := o.spade(t, nil, c.args...)
			require.Equal(t, c.code, r.code, "%s", r)
			require.Contains(t, r.stderr, "spade:", "%s", r)
		})
	}
}

// opsForkContinuesIdenticallyAndGcKeepsEveryTableReadable is TestOps' subtest "fork continues identically and gc keeps every table readable".
func opsForkContinuesIdenticallyAndGcKeepsEveryTableReadable(t *testing.T, o *opsEnv, local storage.Store, base map[string]string, reseed []string) {
	out := o.must(t, nil, "fork", "base", "--round", "1", "branch")
	require.Contains(t, out, "continue with: spade --config "+o.cfg+" --store "+o.store+" --run branch round 2")
	rf, err := pipeline.ReadRunFile(context.Background(), local, "branch")
	require.NoError(t, err)
	require.Equal(t, "base", rf.ForkOf)
	require.Equal(t, 1, rf.ForkRound)
	o.must(t, nil, "round", "2", "--run", "branch")
	opsRequireDigests(t, o, o.store, base, sealDigests(t, local, "branch", 2), "same config from the same round 1 gives the same round 2", "base", "branch")
	r := o.spade(t, reseed, "fork", "base", "--round", "1", "branch")
	require.Equal(t, exitConflict, r.code, "fork onto an existing run with another config: %s", r)

	root := filepath.Join(o.dir, "runs")
	old := time.Now().Add(-48 * time.Hour)
	orphan := filepath.Join(root, "base/round=000001/designs/part-00099-of-00100-00000000deadbeef.parquet")
	stale := filepath.Join(root, "base/round=000001/_pending/design-00000000deadbeef/part-00000.json")
	fresh := filepath.Join(root, "branch/round=000002/rollouts/part-00099-of-00100-00000000cafebabe.parquet")
	for _, p := range []string{orphan, stale, fresh} {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("left behind by a crash"), 0o644))
	}
	require.NoError(t, os.Chtimes(orphan, old, old))
	require.NoError(t, os.Chtimes(stale, old, old))

	out = o.must(t, nil, "gc", "--all-runs", "--dry-run")
	require.Contains(t, out, "would delete")
	require.Contains(t, out, "3 unreferenced or past retention, 0 deleted")
	for _, p := range []string{orphan, stale, fresh} {
		require.FileExists(t, p)
	}
	out = o.must(t, nil, "gc", "--run", "branch", "--grace", "24h")
	require.Contains(t, out, "1 unreferenced or past retention, 0 deleted (0 bytes), 1 within the grace period")
	out = o.must(t, nil, "gc", "--all-runs", "--grace", "24h", "--json")
	var res struct {
		Deleted int `json:"deleted"`
		Garbage []struct {
			Key     string `json:"key"`
			Deleted bool   `json:"deleted"`
		} `json:"garbage"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, 2, res.Deleted, out)
	require.NoFileExists(t, orphan)
	require.NoFileExists(t, stale)
	require.FileExists(t, fresh)
	for _, run := range []string{"base", "reseeded", "branch"} {
		require.Equal(t, len(sealDigests(t, local, run, 2)), readAllTables(t, local, run, 2), run)
	}
	r = o.spade(t, nil, "gc", "--grace", "-1h")
	require.Equal(t, exitUsage, r.code, "%s", r)

	// A key is file content too: a temp file named with a terminal
	// escape is listed escaped in the table (kept as is in --json).
	evil := filepath.Join(root, "base/round=000001/designs/.spade-tmp-\x1b]0;owned\x07")
	require.NoError(t, os.WriteFile(evil, []byte("x"), 0o644))
	out = o.must(t, nil, "gc", "--run", "base", "--dry-run")
	require.NotContains(t, out, "\x1b]0;", "a raw escape reached the terminal: %q", out)
	require.Contains(t, out, `.spade-tmp-\x1b]0;owned\x07`)
	require.NoError(t, os.Remove(evil))
}

// opsShardedStagesInSeparateProcesses is TestOps' subtest "sharded stages in separate processes".
func opsShardedStagesInSeparateProcesses(t *testing.T, o *opsEnv, local storage.Store, base map[string]string) {
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			run := fmt.Sprintf("shard%d", n)
			o.must(t, nil, "stage", "corpus", "--round", "0", "--run", run)
			o.must(t, nil, "commit", "--round", "0", "--stage", "corpus", "--seal", "--run", run)
			o.must(t, nil, "stage", "sample", "--round", "1", "--run", run)
			for _, stage := range []string{"design", "validate", "hint", "rollout"} {
				if stage == "hint" {
					o.must(t, nil, "stage", "hint", "--round", "1", "--run", run)
					continue
				}
				var wg sync.WaitGroup
				results := make([]result, n)
				errs := make([]error, n)
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						results[i], errs[i] = opsExec(o.dir, o.args(o.store, []string{"stage", stage, "--round", "1", "--run", run, "--shard", fmt.Sprintf("%d/%d", i, n)}))
					}()
				}
				wg.Wait()
				for i, r := range results {
					require.NoError(t, errs[i], "%s shard %d/%d: %s", stage, i, n, r)
					require.Equal(t, 0, r.code, "%s shard %d/%d: %s", stage, i, n, r)
				}
				o.must(t, nil, "commit", "--round", "1", "--stage", stage, "--run", run)
			}
			o.must(t, nil, "round", "1", "--run", run)
			opsRequireDigests(t, o, o.store, onlyRounds(base, 1), sealDigests(t, local, run, 1), "stage by stage in shards gives the round of the base run", "base", run)
			for _, table := range []string{"designs", "rollouts"} {
				m, err := pipeline.ReadManifest(context.Background(), local, pipeline.ManifestKey(run, 1, table))
				require.NoError(t, err)
				require.GreaterOrEqual(t, len(m.Files), 3, "%s has parts for several shards", table)
			}
		})
	}
}

// opsRoundNextHoldsTheLease is TestOps' subtest "round next holds the lease".
func opsRoundNextHoldsTheLease(t *testing.T, o *opsEnv, local storage.Store) {
	o.must(t, nil, "fork", "base", "--round", "1", "sched")
	lease := filepath.Join(o.dir, "runs", pipeline.LeaseKey("sched"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first := exec.CommandContext(ctx, spadeBin, o.args(o.store, []string{"round", "next", "--run", "sched"})...)
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	require.NoError(t, first.Start())
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	held := false
	for !held {
		select {
		case err := <-exited:
			exited <- err
			held = true
		case <-time.After(5 * time.Millisecond):
			_, err := os.Stat(lease)
			held = err == nil
		}
	}
	second := o.spade(t, nil, "round", "next", "--run", "sched")
	require.NoError(t, <-exited, "spade %s (the first):\n%s", strings.Join(first.Args[1:], " "), firstOut.String())
	require.Contains(t, firstOut.String(), "round 2 of run sched committed")
	seal3, _ := pipeline.ReadSeal(context.Background(), local, "sched", 3)
	t.Logf("second invocation: %s", second)
	if second.code == 0 {
		// The first finished before the second read the lease: the
		// second ran the next round, never the same one again.
		require.Contains(t, second.stdout, "round 3 of run sched committed", "%s", second)
		require.NotNil(t, seal3, "%s", second)
	} else {
		require.Equal(t, exitBusy, second.code, "%s", second)
		require.Contains(t, second.stderr, "busy", "%s", second)
		require.Nil(t, seal3, "the busy invocation ran nothing")
	}
	require.NoFileExists(t, lease, "the lease is released")
	next, err := pipeline.NextRound(context.Background(), local, "sched")
	require.NoError(t, err)
	require.Equal(t, sealDigests(t, local, "base", 2), onlyRounds(sealDigests(t, local, "sched", next-1), 2))

	// A live lease of another host: busy, with the holder named.
	live, err := json.Marshal(pipeline.Lease{Holder: "cron-host-a", Host: "a", PID: 1, Expires: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lease, live, 0o644))
	r := o.spade(t, nil, "round", "next", "--run", "sched")
	require.Equal(t, exitBusy, r.code, "%s", r)
	require.Contains(t, r.stderr, "cron-host-a", "%s", r)
	after, err := pipeline.NextRound(context.Background(), local, "sched")
	require.NoError(t, err)
	require.Equal(t, next, after)
	require.NoError(t, os.Remove(lease))
}

// opsWholeRoundOnS3EqualsTheLocalRound is TestOps' subtest "whole round on S3 equals the local round".
func opsWholeRoundOnS3EqualsTheLocalRound(t *testing.T, o *opsEnv, base map[string]string) {
	srv := s3server.Start(t)
	s3url := srv.StoreURL("spade/ops", nil)
	r := spade(t, o.dir, nil, o.args(s3url, []string{"round", "1", "--run", "base"})...)
	require.Equal(t, 0, r.code, "%s\nS3 server output:\n%s", r, srv.Output())
	remote := openStore(t, s3url)
	opsRequireDigests(t, o, s3url, onlyRounds(base, 1), sealDigests(t, remote, "base", 1), "the round on S3 equals the local one", "base")
	require.Equal(t, len(onlyRounds(base, 1)), readAllTables(t, remote, "base", 1))
	r = spade(t, o.dir, nil, o.args(s3url, []string{"diff", "base", "base", "--round", "1", "--store-b", o.store})...)
	require.Equal(t, 0, r.code, "%s\nS3 server output:\n%s", r, srv.Output())
	require.Contains(t, r.stdout, "runs are equal", "%s", r)
}

func readGolden(t *testing.T) opsGolden {
	t.Helper()
	b, err := os.ReadFile(opsGoldenPath)
	require.NoError(t, err, "golden file missing: run go test ./cmd/spade -run TestOps -update")
	var g opsGolden
	require.NoError(t, json.Unmarshal(b, &g))
	return g
}

var dagEdgeRe = regexp.MustCompile(`^    t_(\w+) >> t_(\w+)$`)

// TestDagAirflow generates the Airflow DAG, compiles it with Debian's
// Python, and checks that both its dependency lines and its stage-graph
// comment block equal the stage DAG derived from the stages' plans.
// TestStageByStageNewRun follows the Kubernetes/Slurm flow of
// docs/operations.md on a new run: round 0's seal is a step of its own.
// Without it the first stage of round 1 fails at once, saying that round 0
// is not sealed and how to seal it (it used to run the whole round and
// fail at the seal saying round 0 was "not committed"). commit prints
// what it did: "already committed" and "already sealed" when it did
// nothing.
func TestStageByStageNewRun(t *testing.T) {
	o := newOpsEnv(t)
	run := []string{"--run", "k8s"}
	stage := func(name string, round int) result {
		return o.spade(t, nil, append(run, "stage", name, "--round", fmt.Sprint(round))...)
	}
	commit := func(args ...string) string {
		return o.must(t, nil, append(append(run, "commit"), args...)...)
	}
	require.Equal(t, 0, stage("corpus", 0).code)
	r := stage("sample", 1)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "round 1 needs round 0 of run k8s sealed, and it is not sealed (no k8s/round=000000/_ROUND.json)")
	require.Contains(t, r.stderr, "seal it with `spade commit --round 0 --stage corpus --seal`")
	require.NotContains(t, r.stderr, "not committed")
	_, err := os.Stat(filepath.Join(o.dir, "runs", "k8s", "round=000001"))
	require.True(t, os.IsNotExist(err), "nothing written at round 1: %v", err)

	out := commit("--round", "0", "--stage", "corpus", "--seal")
	require.Contains(t, out, "stage corpus of round 0 is already committed\n")
	require.Contains(t, out, "round 0 sealed (round id ")
	out = commit("--round", "0", "--stage", "corpus", "--seal")
	require.Contains(t, out, "round 0 is already sealed (round id ")

	for _, name := range []string{"sample", "design", "validate", "hint", "rollout", "label", "memory", "pool", "grpo", "metrics"} {
		r := stage(name, 1)
		require.Equal(t, 0, r.code, "%s: %s", name, r.stderr)
	}
	out = commit("--round", "1", "--stage", "metrics", "--seal")
	require.Equal(t, "stage metrics of round 1 is already committed\n", out[:strings.Index(out, "\n")+1])
	require.Contains(t, out, "round 1 sealed (round id ")
	out = commit("--round", "1", "--stage", "design", "--seal")
	require.Contains(t, out, "stage design of round 1 is already committed\n")
	require.Contains(t, out, "round 1 is already sealed (round id ")
	require.NotContains(t, out, "round 1 sealed")
	// The sharded path: shards, then a commit that writes.
	for i := range 2 {
		r := o.spade(t, nil, append(run, "stage", "rollout", "--round", "2", "--shard", fmt.Sprintf("%d/2", i))...)
		require.Equal(t, 0, r.code, r.stderr)
	}
	require.Equal(t, "stage rollout of round 2 committed\n", commit("--round", "2", "--stage", "rollout"))
	require.Equal(t, "stage rollout of round 2 is already committed\n", commit("--round", "2", "--stage", "rollout"))
}

func TestDagAirflow(t *testing.T) {
	o := newOpsEnv(t)
	file := filepath.Join(o.dir, "spade_round.py")
	o.must(t, nil, "dag", "airflow", "--out", file, "--shards", "6", "--spade", "/opt/spade bin/spade")
	out, err := exec.Command("/usr/bin/python3", "-m", "py_compile", file).CombinedOutput()
	require.NoError(t, err, "py_compile: %s", out)
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Contains(t, string(src), `'/opt/spade bin/spade' stage design --round {{ params.round }} --shard \"$SPADE_SHARD\"`)
	require.Contains(t, string(src), `"shards": Param(6,`)
	// Every SPADE_* variable the DAG sets must be one spade accepts: a
	// name Load does not know is refused (exit 2), which failed every
	// mapped task when SPADE_SHARD was not among them.
	for _, name := range regexp.MustCompile(`SPADE_[A-Z_]+`).FindAllString(string(src), -1) {
		if name == "SPADE_ENV" { // the DAG file's own Python dict
			continue
		}
		known := slices.Contains(config.CLIVars, name)
		for _, k := range config.Keys() {
			known = known || config.EnvName(k) == name
		}
		require.True(t, known, "the DAG sets %s, which spade refuses", name)
	}
	r := spade(t, o.dir, []string{"SPADE_SHARD=0/6"}, o.args(o.store, []string{"config", "show"})...)
	require.Equal(t, 0, r.code, "a mapped task's environment: %s", r.stderr)
	// The store and config are absolute: Airflow runs each task elsewhere.
	require.Contains(t, string(src), `"SPADE_STORE": "file://`+filepath.Join(o.dir, "runs")+`"`)
	rel := spade(t, o.dir, nil, "--store", "file://./runs", "dag", "airflow")
	require.Equal(t, 0, rel.code, rel.stderr)
	require.Contains(t, rel.stdout, `"SPADE_STORE": "file://`+filepath.Join(o.dir, "runs")+`"`)

	// The DAG is rendered without opening the store: an S3 store that
	// this machine cannot reach (nothing listens on port 9) and holds no
	// credentials for still gives a DAG, which used to fail at the
	// store's probe. A bad URL is still a usage error.
	noCreds := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"}
	s3URL := "s3://spade-runs/prod?endpoint=http://127.0.0.1:9&region=eu-west-1&path_style=true"
	off := spade(t, o.dir, noCreds, "--store", s3URL, "--config", o.cfg, "dag", "airflow")
	require.Equal(t, 0, off.code, off.stderr)
	require.Contains(t, off.stdout, `"SPADE_STORE": "`+s3URL+`"`)
	for _, bad := range []string{"s3://spade-runs/prod?bogus=1", "mem://x", "file://remote-host/dir"} {
		r := spade(t, o.dir, noCreds, "--store", bad, "dag", "airflow")
		require.Equal(t, 2, r.code, "%s: %s", bad, r.stderr)
	}

	want := dagWantFromStages(t, o.cfg)
	// Sanity against the DAG of docs/design.md "Stages and their DAG".
	require.Contains(t, want["design"], "sample")
	require.Contains(t, want["rollout"], "hint")
	require.Contains(t, want["label"], "rollout")
	require.Contains(t, want["grpo"], "rollout")

	// The comment block.
	block, kinds := dagCommentBlock(t, src)
	require.Equal(t, want, block)
	require.Equal(t, "round0", kinds["corpus"])
	for _, s := range defaultSharded {
		require.Equal(t, "sharded", kinds[s], s)
	}

	got, sealed := dagEdges(t, src, want, kinds)
	require.Equal(t, want, got)
	require.Contains(t, sealed, "metrics")
	require.Contains(t, sealed, "corpus")

	// runs-at: the skip signal the DAG's tasks use (regenerate_every 2).
	for _, c := range []struct {
		stage string
		round string
		code  int
	}{
		{"design", "3", 0}, {"design", "2", exitSkip}, {"rollout", "2", 0}, {"corpus", "0", 0}, {"corpus", "1", exitSkip}, {"nope", "1", exitUsage},
	} {
		r := o.spade(t, nil, "dag", "runs-at", c.stage, "--round", c.round)
		require.Equal(t, c.code, r.code, "runs-at %s %s: %s%s", c.stage, c.round, r.stdout, r.stderr)
	}
	r = o.spade(t, nil, "dag", "airflow", "--sharded", "hint,nope")
	require.Equal(t, exitUsage, r.code)
	// The messages used to say 'is not a stage of round 3' for both.
	require.Contains(t, r.stderr, `--sharded "nope": no such stage (stages: corpus, sample,`)
	r = o.spade(t, nil, "dag", "airflow", "--sharded", "corpus")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `--sharded "corpus": the round-0 stage runs as one task`)
}

// dagEdges reads the ">>" lines Airflow executes back into stage
// dependencies (got) and the stages the seal tasks wait for (sealed).
// The dependency lines Airflow executes, mapped back to stages: a
// sharded stage S is S_shards -> S (mapped) -> S_commit.
func dagEdges(t *testing.T, src []byte, want map[string][]string, kinds map[string]string) (got map[string][]string, sealed []string) {
	got = map[string][]string{}
	for s := range want {
		got[s] = []string{}
	}
	stageOf := func(task string) string {
		for _, suffix := range []string{"_shards", "_commit"} {
			if s, ok := strings.CutSuffix(task, suffix); ok && kinds[s] == "sharded" {
				return s
			}
		}
		return task
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		m := dagEdgeRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		from, to := stageOf(m[1]), stageOf(m[2])
		if m[1] == "round0_seal" && to != "seal" {
			// A stage reading the corpus waits for round 0's seal, since
			// spade stage at round 1 needs round 0 sealed.
			from = "corpus"
		} else if kinds[from] == "round0" {
			require.Contains(t, []string{"seal", "round0_seal"}, to, "edge %s >> %s skips round0_seal", m[1], m[2])
		}
		switch {
		case to == "seal" || to == "round0_seal":
			sealed = append(sealed, from)
		case from == to:
			require.Equal(t, m[1], from, "within a sharded stage only S -> S_commit")
			require.Equal(t, m[2], from+"_commit")
		default:
			require.Contains(t, want, to, "edge %s >> %s", m[1], m[2])
			if strings.HasSuffix(m[1], "_shards") || (kinds[from] == "sharded" && !strings.HasSuffix(m[1], "_commit")) {
				t.Fatalf("edge %s >> %s leaves a sharded stage before its commit", m[1], m[2])
			}
			got[to] = append(got[to], from)
		}
	}
	for s := range got {
		sort.Strings(got[s])
	}
	return got, sealed
}

// dagWantFromStages is TestDagAirflow's expected graph, derived from the
// stages themselves rather than from pipeline.PlanRound (an independent
// oracle): stage s follows t when s reads a table t writes at the same
// regeneration round, or at round 0.
func dagWantFromStages(t *testing.T, cfgPath string) map[string][]string {
	// The expected graph, straight from the stages: stage s follows t when
	// s reads a table t writes at the same regeneration round, or at round 0.
	cfg, _, err := config.Load(cfgPath, nil)
	require.NoError(t, err)
	stages := all.Stages(&engine.Engines{Config: &cfg})
	regen := 1 + cfg.RegenerateEvery
	writer := map[string]string{}
	runsAt := func(s pipeline.Stage, r int) bool {
		_, ok := s.Plan(pipeline.NewRoundInfo("x", r, &cfg), &cfg)
		return ok
	}
	want := map[string][]string{}
	for _, s := range stages {
		for _, r := range []int{0, regen} {
			if runsAt(s, r) {
				want[s.Name()] = []string{}
				for _, out := range s.Outputs() {
					writer[fmt.Sprintf("%s@%d", out.Table, r)] = s.Name()
				}
			}
		}
	}
	for _, s := range stages {
		if !runsAt(s, regen) {
			continue
		}
		ins, _ := s.Plan(pipeline.NewRoundInfo("x", regen, &cfg), &cfg)
		for _, in := range ins {
			if w, ok := writer[fmt.Sprintf("%s@%d", in.Table, in.Round)]; ok && w != s.Name() && !slices.Contains(want[s.Name()], w) {
				want[s.Name()] = append(want[s.Name()], w)
			}
		}
		sort.Strings(want[s.Name()])
	}
	return want
}

// dagCommentBlock parses the "# spade-dag-begin" ... "# spade-dag-end"
// comment of a generated DAG file: each stage's dependencies and its kind
// (round0, sharded, ...).
func dagCommentBlock(t *testing.T, src []byte) (block map[string][]string, kinds map[string]string) {
	block = map[string][]string{}
	kinds = map[string]string{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# spade-dag-begin"):
			in = true
		case strings.HasPrefix(line, "# spade-dag-end"):
			in = false
		case in:
			f := strings.Fields(strings.TrimPrefix(line, "# "))
			require.GreaterOrEqual(t, len(f), 3, line)
			require.Equal(t, "<-", f[2], line)
			kinds[f[1]] = f[0]
			block[f[1]] = append([]string{}, f[3:]...)
		}
	}
	return block, kinds
}

// opsExec runs spade without touching t, for use from goroutines.
func opsExec(dir string, args []string) (result, error) {
	cmd := exec.Command(spadeBin, args...)
	cmd.Dir = dir
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return result{args: args, code: ee.ExitCode(), stdout: so.String(), stderr: se.String()}, nil
	}
	return result{args: args, stdout: so.String(), stderr: se.String()}, err
}
