package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// spadeBinary returns -bench.spade or builds cmd/spade into a temp dir.
func spadeBinary(b *testing.B) string {
	b.Helper()
	if *spade != "" {
		abs, err := filepath.Abs(*spade)
		if err != nil {
			b.Fatal(err)
		}
		return abs
	}
	bin := filepath.Join(b.TempDir(), "spade")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/spade")
	cmd.Dir = repoRoot(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/spade: %v\n%s", err, out)
	}
	return bin
}

// roundRun is one `spade round 1` (or one `spade stage`) process.
type roundRun struct {
	wall, cpu time.Duration
	// maxRSS is the spade process's peak resident set in bytes: the
	// largest VmHWM read from /proc/PID/status while it ran (polled every
	// 50 ms; sandboxes are separate processes). wait4's ru_maxrss is no
	// use here: Linux carries the parent's RSS into a vforked child's
	// maxrss at exec, so it reports the benchmark process's own peak.
	maxRSS int64
	stages []StageTime
}

// spadeEnviron is the environment a spade binary under measurement gets:
// this process's, less the variables the Makefile exports for its own
// recipes (SPADE_VENV, SPADE_AIRFLOW_VENV, SPADE_CACHE), which a
// baseline binary built from an older commit refuses as settings it does
// not know ("environment variable SPADE_AIRFLOW_VENV names no setting").
func spadeEnviron(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "SPADE_VENV" && name != "SPADE_AIRFLOW_VENV" && name != "SPADE_CACHE" {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runSpade runs the spade binary with args against store, with extra
// environment variables, and measures it; a failed run fails b.
func runSpade(b *testing.B, bin, store string, env []string, args ...string) roundRun {
	b.Helper()
	run, stderr, err := runSpadeErr(b, bin, store, env, args...)
	if err != nil {
		b.Fatalf("spade %v: %v\n%s", args, err, stderr)
	}
	if run.stages, err = ParseStageLog(strings.NewReader(stderr)); err != nil {
		b.Fatal(err)
	}
	return run
}

// runSpadeErr is runSpade for a run that may fail: the measured run, its
// stderr and the process's error (nil when it exited 0). Stages are not
// parsed.
func runSpadeErr(b *testing.B, bin, store string, env []string, args ...string) (roundRun, string, error) {
	b.Helper()
	cmd := exec.Command(bin, append([]string{"--store", "file://" + store, "--run", "bench", "--log-format", "text"}, args...)...)
	cmd.Env = spadeEnviron(env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var run roundRun
	var err error
	run.wall, run.cpu = measure(b, func() {
		if err = cmd.Start(); err != nil {
			return
		}
		done := make(chan struct{})
		polled := make(chan int64)
		go func() {
			var peak int64
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				if hwm, err := vmHWM(cmd.Process.Pid); err == nil {
					peak = max(peak, hwm)
				}
				select {
				case <-done:
					polled <- peak
					return
				case <-t.C:
				}
			}
		}()
		err = cmd.Wait()
		close(done)
		run.maxRSS = <-polled
	})
	return run, stderr.String(), err
}

// BenchmarkRound runs procedural rounds (the offline backend, sandboxed
// environments, no trainer) with `spade round 1`: at paper scale (24
// environments, 8 + 8 plays each, up to 15 turns; target <= 10 s wall,
// with the runner's per-stage seconds), then at 240 environments, and with
// BENCH_FULL=1 at 2,400 (target: cost linear in environments, peak RSS of
// the spade process < 1 GiB). CPU includes every sandbox process. A
// stage-by-stage run (`spade stage NAME`) at paper scale attributes CPU to
// stages. BENCH_ROUND_SLOTS=24,240 (a comma list) overrides the scales.
func BenchmarkRound(b *testing.B) {
	bin := spadeBinary(b)
	scales := []int{24, 240}
	if full() {
		scales = append(scales, 2400)
	}
	if v := os.Getenv("BENCH_ROUND_SLOTS"); v != "" {
		scales = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("BENCH_ROUND_SLOTS=%q: %q is not a positive integer", v, f)
			}
			scales = append(scales, n)
		}
	}
	const s = "4. round scaling"
	for range b.N {
		var perEnvCPU24 float64
		for _, slots := range scales {
			reps := 1
			if slots == 24 {
				reps = 3
			}
			var wall, cpuS, rss, perEnv []float64
			stageSecs := map[string][]float64{}
			for range reps {
				store := b.TempDir()
				r := runSpade(b, bin, store, []string{fmt.Sprintf("SPADE_SAMPLE_SLOTS=%d", slots)}, "round", "1")
				wall = append(wall, r.wall.Seconds())
				cpuS = append(cpuS, r.cpu.Seconds())
				rss = append(rss, float64(r.maxRSS)/(1<<20))
				perEnv = append(perEnv, r.cpu.Seconds()/float64(slots))
				for _, st := range r.stages {
					if st.Round == 1 {
						stageSecs[st.Stage] = append(stageSecs[st.Stage], st.Seconds)
					}
				}
			}
			name := fmt.Sprintf("%d environments", slots)
			wallTarget := Target{}
			if slots == 24 {
				wallTarget = AtMost(10)
				perEnvCPU24 = Median(perEnv)
			}
			rec.Add(s, name+": wall clock of spade round 1", "s", wall, wallTarget, "")
			rec.Add(s, name+": CPU incl. sandboxes", "CPU-s", cpuS, Target{}, "")
			rec.Add(s, name+": CPU per environment", "CPU-s", perEnv, Target{}, "")
			if slots != 24 && perEnvCPU24 > 0 {
				rel := make([]float64, len(perEnv))
				for i, v := range perEnv {
					rel[i] = v / perEnvCPU24
				}
				rec.Add(s, name+": CPU per environment relative to 24", "x", rel, AtMost(1.2), "1.0 = linear")
			}
			rssTarget := Target{}
			if slots == 2400 {
				rssTarget = AtMost(1024)
			}
			rec.Add(s, name+": peak RSS of the spade process", "MiB", rss, rssTarget, "")
			if slots == 24 {
				names := make([]string, 0, len(stageSecs))
				for n := range stageSecs {
					names = append(names, n)
				}
				sort.Slice(names, func(i, j int) bool { return Median(stageSecs[names[i]]) > Median(stageSecs[names[j]]) })
				for _, n := range names {
					rec.Add(s, "24 environments: stage "+n+" (runner log, start to commit)", "s", stageSecs[n], Target{}, "")
				}
			}
		}
		// Stage by stage at paper scale: CPU per stage incl. sandboxes.
		store := b.TempDir()
		runSpade(b, bin, store, nil, "stage", "corpus", "--round", "0")
		// Round 1's stages need round 0 sealed.
		runSpade(b, bin, store, nil, "commit", "--round", "0", "--stage", "corpus", "--seal")
		for _, st := range []string{"sample", "design", "validate", "hint", "rollout", "label", "memory", "pool", "grpo", "metrics"} {
			r := runSpade(b, bin, store, nil, "stage", st, "--round", "1")
			rec.Add(s, "24 environments, spade stage "+st+": CPU incl. sandboxes", "CPU-s", []float64{r.cpu.Seconds()}, Target{}, fmt.Sprintf("wall %.2f s, one process per stage", r.wall.Seconds()))
		}
	}
}

// vmHWM returns a process's peak resident set size in bytes from
// /proc/PID/status (proc(5): "VmHWM:    1234 kB").
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVMHWM(b)
}
