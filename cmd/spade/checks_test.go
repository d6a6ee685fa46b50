package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
)

// copyRuns copies the store directory of from into a new env with the same
// config, so each case damages its own copy.
func copyRuns(t *testing.T, from *opsEnv) *opsEnv {
	t.Helper()
	o := newOpsEnv(t)
	src := filepath.Join(from.dir, "runs")
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(o.dir, "runs", rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	require.NoError(t, err)
	return o
}

// TestRoundChecks: on a two-round run, `round 3` refuses a chain whose
// seals and manifests disagree (exit 1, integrity check failed, naming the
// file) and writes nothing, and `status` refuses a seal and a manifest
// that disagree; an interrupted fork is refused by status and
// round with the fork command to run again; the fork's printed command
// continues the fork as printed.
func TestRoundChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs full rounds in subprocesses")
	}
	base := newOpsEnv(t)
	base.must(t, nil, "round", "1", "--run", "base")
	base.must(t, nil, "round", "2", "--run", "base")
	r2 := filepath.Join("runs", "base", "round=000002")

	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string
	}{
		{"(a) a table digest of round 2's seal edited", func(t *testing.T, dir string) {
			p := filepath.Join(dir, r2, "_ROUND.json")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			re := regexp.MustCompile(`"labels": "[0-9a-f]{64}"`)
			require.True(t, re.Match(b))
			require.NoError(t, os.WriteFile(p, re.ReplaceAll(b, []byte(`"labels": "`+strings.Repeat("0", 64)+`"`)), 0o644))
		}, []string{"base/round=000002/labels/_manifest.json", "integrity check failed", "base/round=000002/_ROUND.json records 000000000000 for table labels"}},
		{"(b) rows of a manifest edited", func(t *testing.T, dir string) {
			p := filepath.Join(dir, r2, "labels", "_manifest.json")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			re := regexp.MustCompile(`"rows": \d+,`)
			require.Len(t, re.FindAll(b, -1), 2, "one file and the total")
			require.NoError(t, os.WriteFile(p, re.ReplaceAll(b, []byte(`"rows": 999,`)), 0o644))
		}, []string{"base/round=000002/labels/_manifest.json", "integrity check failed", "content digest"}},
		{"(c) a manifest truncated", func(t *testing.T, dir string) {
			p := filepath.Join(dir, r2, "labels", "_manifest.json")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, b[:len(b)/2], 0o644))
		}, []string{"base/round=000002/labels/_manifest.json", "malformed JSON", "integrity check failed"}},
		{"(d) round 1's seal deleted", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "runs", "base", "round=000001", "_ROUND.json")))
		}, []string{"base/round=000001/_ROUND.json is missing, but round 2 is sealed", "integrity check failed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := copyRuns(t, base)
			c.damage(t, o.dir)
			r := o.spade(t, nil, "round", "3", "--run", "base")
			require.Equal(t, exitFailure, r.code, "round 3 on a damaged chain: %s%s", r.stdout, r.stderr)
			for _, w := range c.want {
				require.Contains(t, r.stderr, w)
			}
			require.NoDirExists(t, filepath.Join(o.dir, "runs", "base", "round=000003"), "round 3 wrote nothing")
			if strings.HasPrefix(c.name, "(a)") || strings.HasPrefix(c.name, "(b)") {
				// status used to list the edited table (its rows, its
				// digest) as sealed, exit 0.
				r := o.spade(t, nil, "status", "--run", "base")
				require.Equal(t, exitFailure, r.code, "status on a seal and manifest that disagree: %s%s", r.stdout, r.stderr)
				for _, w := range c.want {
					require.Contains(t, r.stderr, w)
				}
			}
		})
	}

	t.Run("a run file whose config was edited", func(t *testing.T) { roundChecksARunFileWhoseConfigWasEdited(t, base) })

	t.Run("interrupted fork", func(t *testing.T) { roundChecksInterruptedFork(t, base) })

	t.Run("the printed command continues the fork", func(t *testing.T) { roundChecksThePrintedCommandContinuesTheFork(t, base) })
}

// roundChecksARunFileWhoseConfigWasEdited is TestRoundChecks's subtest "a run file whose config was edited".
func roundChecksARunFileWhoseConfigWasEdited(t *testing.T, base *opsEnv) {
	// The digest it records is left as it was: fork
	// --config-from-source used to pin the edited config in the new
	// run as "the source run's", and report to describe the run by it.
	o := copyRuns(t, base)
	// A fork made before the edit: report reads its inherited
	// rounds by the source run's config.
	o.must(t, nil, "fork", "base", "--round", "2", "child")
	p := filepath.Join(o.dir, "runs", "base", "_RUN.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	re := regexp.MustCompile(`"seed": \d+`)
	require.True(t, re.Match(b))
	require.NoError(t, os.WriteFile(p, re.ReplaceAll(b, []byte(`"seed": 777`)), 0o644))
	for _, args := range [][]string{{"fork", "base", "--round", "2", "edited", "--config-from-source"}, {"--run", "base", "report"}, {"--run", "child", "report"}} {
		r := o.spade(t, nil, args...)
		require.Equal(t, exitFailure, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, "base/_RUN.json: integrity check failed")
	}
	require.NoDirExists(t, filepath.Join(o.dir, "runs", "edited"))
}

// roundChecksInterruptedFork is TestRoundChecks's subtest "interrupted fork".
func roundChecksInterruptedFork(t *testing.T, base *opsEnv) {
	o := copyRuns(t, base)
	o.must(t, nil, "fork", "base", "--round", "2", "half")
	// The states a kill leaves: every file but the last seal, and only
	// the run file.
	run := filepath.Join(o.dir, "runs", "half")
	for _, state := range []string{"last seal missing", "run file only"} {
		if state == "last seal missing" {
			require.NoError(t, os.Remove(filepath.Join(run, "round=000002", "_ROUND.json")))
		} else {
			for _, d := range []string{"round=000000", "round=000001", "round=000002"} {
				require.NoError(t, os.RemoveAll(filepath.Join(run, d)))
			}
		}
		for _, args := range [][]string{{"status"}, {"round", "1"}, {"round", "3"}} {
			r := o.spade(t, nil, append(args, "--run", "half")...)
			require.Equal(t, exitFailure, r.code, "%s: %v: %s%s", state, args, r.stdout, r.stderr)
			require.Contains(t, r.stderr, "run half is an incomplete fork of base at round 2")
			require.Contains(t, r.stderr, "spade fork base --round 2 half")
		}
		require.NoDirExists(t, filepath.Join(run, "round=000003"))
	}
	o.must(t, nil, "fork", "base", "--round", "2", "half")
	o.must(t, nil, "status", "--run", "half")
	o.must(t, nil, "round", "3", "--run", "half")
}

// roundChecksThePrintedCommandContinuesTheFork is TestRoundChecks's subtest "the printed command continues the fork".
func roundChecksThePrintedCommandContinuesTheFork(t *testing.T, base *opsEnv) {
	o := copyRuns(t, base)
	out := o.must(t, []string{"SPADE_SEED=12", "SPADE_WORKERS=1"}, "fork", "base", "--round", "2", "reseeded")
	want := "continue with: SPADE_SEED=12 spade --config " + o.cfg + " --store " + o.store + " --run reseeded round 3"
	require.Contains(t, out, want, "the operational SPADE_WORKERS is left out")
	line := out[strings.Index(out, want)+len("continue with: "):]
	line = strings.TrimSpace(strings.SplitN(line, "\n", 2)[0])
	cmd := exec.Command("sh", "-c", strings.Replace(line, "spade", spadeBin, 1)+" --log-level warn")
	cmd.Dir = t.TempDir() // another directory: the printed command must not depend on it
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", line, b)
	require.Contains(t, string(b), "round 3 of run reseeded committed")
}

// TestRoundNextAfterKill: a `round next` killed with SIGKILL leaves its
// lease behind; the next `round next` on this host takes it over at once
// (its pid is gone) and resumes, also after a plain `round N` finished the
// round. --lease-ttl <= 0 is a usage error.
func TestRoundNextAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs full rounds in subprocesses")
	}
	o := newOpsEnv(t)
	lease := filepath.Join(o.dir, "runs", pipeline.LeaseKey("cron"))
	for _, ttl := range []string{"0", "-5", "NaN"} {
		r := o.spade(t, nil, "round", "next", "--run", "cron", "--lease-ttl", ttl)
		require.Equal(t, exitUsage, r.code, "--lease-ttl %s: %s", ttl, r.stderr)
		require.Contains(t, r.stderr, "--lease-ttl")
		require.NoFileExists(t, lease)
	}
	killHolder := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, spadeBin, o.args(o.store, []string{"round", "next", "--run", "cron"})...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		for {
			if _, err := os.Stat(lease); err == nil {
				break
			}
			select {
			case err := <-exited:
				t.Fatalf("round next exited (%v) before it took the lease: %s", err, out.String())
			case <-time.After(2 * time.Millisecond):
			}
		}
		require.NoError(t, cmd.Process.Kill())
		<-exited
		require.FileExists(t, lease, "the killed holder left its lease: %s", out.String())
	}

	killHolder() // during round 1
	r := o.spade(t, nil, "round", "next", "--run", "cron")
	require.Equal(t, 0, r.code, "round next after the holder was killed: %s", r.stderr)
	require.Contains(t, r.stdout, "round 1 of run cron committed")
	require.Contains(t, r.stderr, "taking over a stale lease")
	require.Contains(t, r.stderr, "no longer runs")
	require.NoFileExists(t, lease)

	killHolder() // during round 2, which a plain round 2 then finishes
	o.must(t, nil, "round", "2", "--run", "cron")
	r = o.spade(t, nil, "round", "next", "--run", "cron")
	require.Equal(t, 0, r.code, "round next after round 2 was finished by hand: %s", r.stderr)
	require.Contains(t, r.stdout, "round 3 of run cron committed")
	require.NoFileExists(t, lease)
}

// TestRoundNextLeaseLost: a `round next` stopped (SIGSTOP) past its lease's
// expiry, whose lease another `round next` takes over meanwhile, must not
// commit beside the new holder once it is continued (SIGCONT): it stops
// with exit 1 naming the lost lease, and the new holder finishes the
// round (exit 0).
func TestRoundNextLeaseLost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs full rounds in subprocesses")
	}
	o := newOpsEnv(t)
	lease := filepath.Join(o.dir, "runs", pipeline.LeaseKey("cron"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zombie := exec.CommandContext(ctx, spadeBin, o.args(o.store, []string{"round", "next", "--run", "cron", "--lease-ttl", "1"})...)
	var zout bytes.Buffer
	zombie.Stdout, zombie.Stderr = &zout, &zout
	require.NoError(t, zombie.Start())
	for {
		if _, err := os.Stat(lease); err == nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, zombie.Process.Signal(syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = zombie.Process.Signal(syscall.SIGCONT)
		}
	}()
	time.Sleep(1500 * time.Millisecond) // past the lease's expiry

	taker := exec.CommandContext(ctx, spadeBin, o.args(o.store, []string{"round", "next", "--run", "cron", "--lease-ttl", "1", "--log-level", "info"})...)
	var tout, terr bytes.Buffer
	taker.Stdout, taker.Stderr = &tout, &terr
	require.NoError(t, taker.Start())
	for { // until the taker holds the lease
		var l pipeline.Lease
		if b, err := os.ReadFile(lease); err == nil && json.Unmarshal(b, &l) == nil && l.PID == taker.Process.Pid {
			break
		}
		require.NoError(t, ctx.Err(), "the taker never took the lease over")
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, zombie.Process.Signal(syscall.SIGCONT))
	stopped = false
	err := zombie.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	require.Equal(t, exitFailure, code, "the continued holder must stop, not finish the round beside the new holder:\n%s", zout.String())
	require.Contains(t, zout.String(), "lease lost")
	require.NoError(t, taker.Wait(), "the new holder: %s", terr.String())
	require.Contains(t, tout.String(), "round 1 of run cron committed")
	require.NoFileExists(t, lease)
	r := o.spade(t, nil, "round", "next", "--run", "cron")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "round 2 of run cron committed")
}

// TestGCKeepCheckpointsRule: a bad --keep-checkpoints rule is a usage
// error (exit 2) naming the term, before gc reads the store.
func TestGCKeepCheckpointsRule(t *testing.T) {
	dir := t.TempDir()
	for _, rule := range []string{"last:0", "keep:3", ""} {
		r := spade(t, dir, nil, "gc", "--keep-checkpoints", rule)
		require.Equal(t, 2, r.code, "rule %q: %s", rule, r.stderr)
		require.Contains(t, r.stderr, "--keep-checkpoints", rule)
	}
}
