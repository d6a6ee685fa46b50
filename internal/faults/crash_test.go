package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// killWindow is one kill point: after the log line msg for (round, stage),
// wait a random share of the stage's reference duration, then SIGKILL.
type killWindow struct {
	msg   string
	round int
	stage string
	secs  float64
}

// killWindows derives kill points from the reference run's log: one inside
// every stage of rounds 0-2 (two inside the long design, validate and
// rollout stages), and one just after the last commit of each round, where
// the round is being sealed and its part records deleted.
func killWindows(events []logEvent) []killWindow {
	lastCommit := map[int]int{}
	for i, ev := range events {
		if ev.Msg == "stage committed" {
			lastCommit[ev.Round] = i
		}
	}
	var out []killWindow
	for i, ev := range events {
		if ev.Msg != "stage committed" {
			continue
		}
		out = append(out, killWindow{"stage start", ev.Round, ev.Stage, ev.Seconds})
		switch ev.Stage {
		case "design", "validate", "rollout":
			out = append(out, killWindow{"stage start", ev.Round, ev.Stage, ev.Seconds})
		}
		if ev.Round > 0 && lastCommit[ev.Round] == i {
			out = append(out, killWindow{"stage committed", ev.Round, ev.Stage, 0.08})
		}
	}
	return out
}

// order numbers the log positions of the reference run so a kill point
// still fires when a resumed invocation skips past its stage.
func order(events []logEvent) map[string]int {
	o := map[string]int{}
	for i, ev := range events {
		if ev.Msg == "stage start" || ev.Msg == "stage committed" {
			o[ev.Msg+"|"+ev.Stage+"|"+itoa(ev.Round)] = i
		}
	}
	return o
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCrashConsistency kills a two-round run with SIGKILL at >= 20 points
// spread over every stage and the seals, on a local store and on S3
// (versitygw), rerunning after each kill. After every kill a reader sees
// only whole committed tables equal to an uninterrupted run's (status,
// sql, and an audit of every manifest's files by sha256), nothing that
// was committed changes or vanishes, and the final tables and round ids
// equal the uninterrupted run's.
func TestCrashConsistency(t *testing.T) {
	refRun := referenceRun(t)
	windows := killWindows(refRun.events)
	require.GreaterOrEqual(t, len(windows), 20, "kill windows from the reference log")
	backends := []string{"file", "s3"}
	for bi, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			cfg := writeFile(t, dir, "cfg.yaml", crashConfig)
			args := []string{"--config", cfg}
			storeURL := "file://" + dir + "/runs"
			if backend == "s3" {
				srv := s3server.Start(t)
				storeURL = srv.StoreURL("crash", nil)
			}
			args = append(args, "--store", storeURL)
			st, err := storage.Open(ctx, storeURL)
			require.NoError(t, err)
			defer st.Close()

			ws := windows
			if testing.Short() {
				// One point per stage, still >= 20 over the two rounds.
				ws = nil
				seen := map[killWindow]bool{}
				for _, w := range windows {
					if !seen[w] {
						seen[w] = true
						ws = append(ws, w)
					}
				}
			}
			ord := order(refRun.events)
			rng := rand.New(rand.NewPCG(20260, uint64(bi)))
			var view *committedView
			kills := 0
			for i, w := range ws {
				round := "1"
				if _, err := pipeline.ReadSeal(ctx, st, "default", 1); err == nil {
					round = "2"
				}
				if _, err := pipeline.ReadSeal(ctx, st, "default", 2); err == nil {
					// The run finished before the kill points ran out
					// (kills that landed after a run's last write): start
					// it again in an empty store, so every point is used.
					wipe(t, ctx, st)
					view = nil
					round = "1"
				}
				target := ord[w.msg+"|"+w.stage+"|"+itoa(w.round)]
				delay := time.Duration(rng.Float64() * 1.1 * w.secs * float64(time.Second))
				p := start(t, dir, append(args, "round", round)...)
				killed := false
				var timer <-chan time.Time
				deadline := time.After(invocationLimit)
				events := p.events
			wait:
				for {
					select {
					case ev, ok := <-events:
						if !ok {
							events = nil
							continue
						}
						pos, known := ord[ev.Msg+"|"+ev.Stage+"|"+itoa(ev.Round)]
						if timer == nil && known && pos >= target {
							timer = time.After(delay)
						}
					case <-timer:
						p.kill()
						killed = true
						timer = nil
					case err := <-p.done:
						var ee *exec.ExitError
						switch {
						case killed && err == nil:
							// The run exited 0 just before SIGKILL reached it
							// (SIGKILL cannot be caught): an uninterrupted run,
							// not a kill. Rounds are fast now, so it happens.
						case killed:
							require.True(t, errors.As(err, &ee), "kill %d: %v", i, err)
							kills++
						default:
							require.NoError(t, err, "run %d (no kill) must succeed: %s", i, tail(p.stderrText(), 3000))
						}
						break wait
					case <-deadline:
						p.kill()
						t.Fatalf("kill point %d (%s %s round %d): spade ran past %s", i, w.msg, w.stage, w.round, invocationLimit)
					}
				}
				// A reader after the kill: status, sql and an audit agree
				// and see only whole tables of the uninterrupted run.
				if _, err := pipeline.ReadRunFile(ctx, st, "default"); err == nil {
					tables, _ := statusDigests(t, dir, args...)
					view = audit(t, ctx, st, "default", refRun.tables, refRun.seals, view)
					require.Len(t, tables, len(view.manifests), "status lists exactly the committed manifests")
					for k, d := range tables {
						require.Equal(t, refRun.tables[k], d, "status digest of %s", k)
					}
					sqlCounts(t, dir, args, view)
				}
			}
			t.Logf("%s: %d kill points, %d kills", backend, len(ws), kills)
			require.GreaterOrEqual(t, kills, 20, "SIGKILLs that landed mid-run")
			for _, round := range []string{"1", "2"} {
				r := spade(t, dir, nil, append(args, "round", round)...)
				require.Equal(t, 0, r.code, "final round %s: %s", round, r.stderr)
			}
			tables, seals := statusDigests(t, dir, args...)
			require.Equal(t, refRun.tables, tables, "every table's content digest equals the uninterrupted run's")
			require.Equal(t, refRun.seals, seals, "round ids equal the uninterrupted run's")
			final := audit(t, ctx, st, "default", refRun.tables, refRun.seals, view)
			require.Len(t, final.seals, 3)
		})
	}
}

// wipe deletes every object of st (the crash test starting its run again).
func wipe(t *testing.T, ctx context.Context, st storage.Store) {
	t.Helper()
	infos, err := st.List(ctx, "")
	require.NoError(t, err)
	for _, in := range infos {
		require.NoError(t, st.Delete(ctx, in.Key))
	}
}
