package diff

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// commit writes parts as Parquet files and a manifest for (run, round,
// name), as the runner would, and returns the manifest.
func commit[T any](t testing.TB, s storage.Store, run string, round int, name string, tbl schemas.Table[T], parts ...[]T) *pipeline.Manifest {
	t.Helper()
	ctx := context.Background()
	m := &pipeline.Manifest{FormatVersion: pipeline.FormatVersion, Run: run, Round: round, Table: name, Kind: tbl.Name,
		SchemaVersion: tbl.Version, SchemaFingerprint: tbl.Fingerprint(), Stage: "test", StageFingerprint: "fp", Files: []pipeline.FileEntry{}}
	for p, rows := range parts {
		data, err := table.Encode(tbl, rows)
		require.NoError(t, err)
		sum := sha256.Sum256(data)
		sha := hex.EncodeToString(sum[:])
		key := pipeline.PartKey(run, round, name, p, len(parts), sha)
		require.NoError(t, storage.PutBytes(ctx, s, key, data))
		m.Files = append(m.Files, pipeline.FileEntry{Key: key, SHA256: sha, Bytes: int64(len(data)), Rows: int64(len(rows)), Part: p, RowGroups: 1})
		m.Rows += int64(len(rows))
		m.Bytes += int64(len(data))
	}
	require.NoError(t, storage.PutBytes(ctx, s, pipeline.ManifestKey(run, round, name), m.Encode()))
	return m
}

func createRun(t testing.TB, s storage.Store, run string) {
	t.Helper()
	b, err := json.Marshal(pipeline.RunFile{FormatVersion: pipeline.FormatVersion, Run: run})
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(context.Background(), s, pipeline.RunFileKey(run), b))
}

func rollouts(n int) []schemas.Rollout {
	out := make([]schemas.Rollout, n)
	for i := range out {
		out[i] = schemas.Rollout{
			EnvID: fmt.Sprintf("env-%06d", i/4), Hinted: i%2 == 1, Sample: int64(i % 4 / 2), Seed: int64(i),
			Actions: []string{"look", fmt.Sprint(i % 7)}, StepRewards: []float64{0, float64(i%3) / 2},
			Return: float64(i%3) / 2, Turns: 2, Terminated: true,
		}
	}
	return out
}

// TestOneCellIn100kRows is the acceptance check of the issue: a single
// changed cell in a large table is found by key and column.
func TestOneCellIn100kRows(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	rows := rollouts(100_000)
	ma := commit(t, s, "a", 1, "rollouts", schemas.Rollouts, rows[:50_000], rows[50_000:])
	changed := rollouts(100_000)
	changed[77_777].Return = 42.5 // env-019444, hinted, sample 0
	mb := commit(t, s, "b", 1, "rollouts", schemas.Rollouts, changed[:50_000], changed[50_000:])
	require.NotEqual(t, ma.ContentDigest(), mb.ContentDigest())

	td, err := Tables(ctx, s, ma, s, mb, Options{})
	require.NoError(t, err)
	require.Equal(t, StatusDifferent, td.Status)
	require.Equal(t, 0, td.Added)
	require.Equal(t, 0, td.Removed)
	require.Equal(t, 1, td.Changed)
	require.Equal(t, []string{"return"}, td.ChangedColumns)
	require.Len(t, td.Rows, 1)
	want := RowChange{Change: Changed,
		Key:     []Cell{{"env_id", `"env-019444"`}, {"hinted", "true"}, {"sample", "0"}},
		Columns: []ColumnChange{{Column: "return", Old: "1", New: "42.5"}}}
	require.Equal(t, want, td.Rows[0])
	require.Equal(t, int64(100_000), td.RowsA)
}

func TestTables(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	base := []schemas.Metric{{Name: "a", Value: 1}, {Name: "b", Skill: "x", Value: math.NaN()}, {Name: "c", Value: 3}}
	ma := commit(t, s, "a", 1, "metrics", schemas.Metrics, base)

	t.Run("equal digests short-circuit without reading rows", func(t *testing.T) {
		mb := commit(t, s, "b", 1, "metrics", schemas.Metrics, base)
		require.Equal(t, ma.ContentDigest(), mb.ContentDigest())
		empty := memstore.New(t.Name() + "-empty") // holds none of the files
		td, err := Tables(ctx, empty, ma, empty, mb, Options{})
		require.NoError(t, err)
		require.True(t, td.Equal())
	})
	t.Run("added removed changed, NaN unchanged", func(t *testing.T) {
		rows := []schemas.Metric{{Name: "a", Value: 2}, {Name: "b", Skill: "x", Value: math.NaN()}, {Name: "d", Value: 4}}
		mb := commit(t, s, "c", 1, "metrics", schemas.Metrics, rows)
		td, err := Tables(ctx, s, ma, s, mb, Options{})
		require.NoError(t, err)
		require.Equal(t, StatusDifferent, td.Status)
		require.Equal(t, [3]int{1, 1, 1}, [3]int{td.Added, td.Removed, td.Changed})
		require.Equal(t, []string{Changed, Removed, Added}, []string{td.Rows[0].Change, td.Rows[1].Change, td.Rows[2].Change})
		require.Equal(t, `"c"`, td.Rows[1].Key[0].Value)
	})
	t.Run("same rows in other parts", func(t *testing.T) {
		mb := commit(t, s, "d", 1, "metrics", schemas.Metrics, base[:1], base[1:])
		td, err := Tables(ctx, s, ma, s, mb, Options{})
		require.NoError(t, err)
		require.Equal(t, StatusDifferent, td.Status)
		require.Zero(t, td.Added+td.Removed+td.Changed)
		require.NotEmpty(t, td.Note)
	})
	t.Run("duplicate keys pair one to one", func(t *testing.T) {
		dupA := commit(t, s, "e", 1, "train_metrics", schemas.TrainMetrics, []schemas.TrainMetric{{Step: 1, Name: "loss", Value: 1}, {Step: 1, Name: "loss", Value: 2}})
		dupB := commit(t, s, "f", 1, "train_metrics", schemas.TrainMetrics, []schemas.TrainMetric{{Step: 1, Name: "loss", Value: 1}, {Step: 1, Name: "loss", Value: 3}, {Step: 1, Name: "loss", Value: 4}})
		td, err := Tables(ctx, s, dupA, s, dupB, Options{})
		require.NoError(t, err)
		require.Equal(t, [3]int{1, 0, 1}, [3]int{td.Added, td.Removed, td.Changed})
		require.Equal(t, "(duplicate key occurrence)", td.Rows[0].Key[2].Column)
	})
	t.Run("truncation and value cap", func(t *testing.T) {
		var ra, rb []schemas.Hint
		for i := 0; i < 30; i++ {
			ra = append(ra, schemas.Hint{EnvID: fmt.Sprintf("e%02d", i), Hint: "short"})
			rb = append(rb, schemas.Hint{EnvID: fmt.Sprintf("e%02d", i), Hint: string(bytes.Repeat([]byte("é"), 100))})
		}
		xa := commit(t, s, "g", 1, "hints", schemas.Hints, ra)
		xb := commit(t, s, "h", 1, "hints", schemas.Hints, rb)
		td, err := Tables(ctx, s, xa, s, xb, Options{MaxRows: 5, MaxValueBytes: 21})
		require.NoError(t, err)
		require.Equal(t, 30, td.Changed)
		require.Len(t, td.Rows, 5)
		require.True(t, td.Truncated)
		require.Equal(t, `"éééééééééé…(202 bytes)`, td.Rows[0].Columns[0].New)
	})
	t.Run("only in one run", func(t *testing.T) {
		td, err := Tables(ctx, s, ma, s, nil, Options{})
		require.NoError(t, err)
		require.Equal(t, StatusOnlyA, td.Status)
		require.Equal(t, 3, td.Removed)
		td, err = Tables(ctx, s, nil, s, ma, Options{})
		require.NoError(t, err)
		require.Equal(t, StatusOnlyB, td.Status)
	})
	t.Run("schema change is reported, not diffed", func(t *testing.T) {
		other := commit(t, s, "i", 1, "metrics", schemas.TrainMetrics, []schemas.TrainMetric{{Step: 1}})
		td, err := Tables(ctx, s, ma, s, other, Options{})
		require.NoError(t, err)
		require.Equal(t, StatusSchema, td.Status)
	})
	t.Run("corrupt file is an integrity error", func(t *testing.T) {
		mb := commit(t, s, "j", 1, "metrics", schemas.Metrics, []schemas.Metric{{Name: "z"}})
		require.NoError(t, storage.PutBytes(ctx, s, mb.Files[0].Key, []byte("not parquet")))
		_, err := Tables(ctx, s, ma, s, mb, Options{})
		require.ErrorIs(t, err, pipeline.ErrIntegrity)
		require.ErrorContains(t, err, mb.Files[0].Key)
	})
	t.Run("unknown kind", func(t *testing.T) {
		bad := *ma
		bad.Kind = "no_such_kind"
		err := ReadRows(ctx, s, &bad, func(reflect.Value) error { return nil })
		require.ErrorContains(t, err, `unknown table kind "no_such_kind"`)
	})
}

// TestRunsText compares two small runs and checks the text report
// against a golden file (go test ./pipeline/diff -update rewrites it).
func TestRunsText(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	createRun(t, s, "base")
	createRun(t, s, "cand")
	commit(t, s, "base", 0, "metrics", schemas.Metrics, []schemas.Metric{{Name: "same", Value: 1}})
	commit(t, s, "cand", 0, "metrics", schemas.Metrics, []schemas.Metric{{Name: "same", Value: 1}})
	commit(t, s, "base", 1, "metrics", schemas.Metrics, []schemas.Metric{{Name: "regret", Value: 0.25}, {Name: "gone", Value: 1}})
	commit(t, s, "cand", 1, "metrics", schemas.Metrics, []schemas.Metric{{Name: "regret", Value: 0.5}, {Name: "new", Skill: "planning", Value: 2}})
	commit(t, s, "cand", 1, "train_metrics", schemas.TrainMetrics, []schemas.TrainMetric{{Step: 0, Name: "loss", Value: 0.1}})

	rep, err := Runs(ctx, Side{s, "base"}, Side{s, "cand"}, Options{Tables: []string{"metrics", "train_metrics", "metrics"}})
	require.NoError(t, err)
	require.False(t, rep.Equal)
	require.Equal(t, []int{0, 1}, rep.Rounds)
	require.Len(t, rep.Tables, 3)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteText(&buf, true))
	golden := filepath.Join("testdata", "runs.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), buf.String())

	same, err := Runs(ctx, Side{s, "base"}, Side{s, "base"}, Options{Tables: []string{"metrics"}, Rounds: []int{1}})
	require.NoError(t, err)
	require.True(t, same.Equal)

	_, err = Runs(ctx, Side{s, "base"}, Side{s, "missing"}, Options{Tables: []string{"metrics"}})
	require.True(t, errors.Is(err, pipeline.ErrNotCommitted), "%v", err)

	// A round neither run has is an error, not an equal comparison.
	_, err = Runs(ctx, Side{s, "base"}, Side{s, "base"}, Options{Tables: []string{"metrics", "train_metrics"}, Rounds: []int{99}})
	require.True(t, errors.Is(err, pipeline.ErrNotCommitted), "%v", err)
	require.ErrorContains(t, err, "round 99: run base has no committed table there")
	_, err = Runs(ctx, Side{s, "base"}, Side{s, "cand"}, Options{Tables: []string{"train_metrics"}, Rounds: []int{0}})
	require.ErrorContains(t, err, "has a committed table train_metrics there")
}

func TestFormatPair(t *testing.T) {
	long := func(tail string) reflect.Value { return reflect.ValueOf(string(bytes.Repeat([]byte("a"), 200)) + tail) }
	cases := []struct {
		name         string
		a, b         reflect.Value
		max          int
		wantA, wantB string
	}{
		{"short", reflect.ValueOf(1.5), reflect.ValueOf(2), 10, "1.5", "2"},
		{"early difference", reflect.ValueOf("xbcdefghijklmnopqrstuvwxyz"), reflect.ValueOf("ybcdefghijklmnopqrstuvwxyz"), 20 + 16, `"xbcdefghijklmnopqrstuvwxyz"`, `"ybcdefghijklmnopqrstuvwxyz"`},
		{"late difference", long("OLD"), long("NEW"), 30, `(185 bytes)…aaaaaaaaaaaaaaaaOLD"`, `(185 bytes)…aaaaaaaaaaaaaaaaNEW"`},
		{"late difference, long tails", long("OLD" + string(bytes.Repeat([]byte("z"), 50))), long("NEW"), 30,
			`(185 bytes)…aaaaaaaaaaaaaaaaOLDzzzzzzzzzzz…(70 bytes)`, `(185 bytes)…aaaaaaaaaaaaaaaaNEW"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := formatPair(c.a, c.b, c.max)
			require.Equal(t, c.wantA, a)
			require.Equal(t, c.wantB, b)
		})
	}
}

// TestWriteTextEscapesControls: a value from a table that would move the
// cursor or reorder the line on a terminal is shown escaped; --json keeps it.
func TestWriteTextEscapesControls(t *testing.T) {
	rep := &Report{A: "a", B: "b", Tables: []TableDiff{{
		Round: 1, Table: "designs", Status: StatusDifferent, RowsA: 1, RowsB: 1, Changed: 1,
		Rows: []RowChange{{Change: Changed, Key: []Cell{{Column: "slot_id", Value: "s\u202e1"}},
			Columns: []ColumnChange{{Column: "response", Old: `"ok"`, New: "\"\u009b2K\u202eevil\""}}}},
	}}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteText(&buf, true))
	out := buf.String()
	require.NotContains(t, out, "\u202e")
	require.NotContains(t, out, "\u009b")
	require.Contains(t, out, `slot_id=s\u202e1`)
	require.Contains(t, out, `"ok" -> "\x9b2K\u202eevil"`)
}
