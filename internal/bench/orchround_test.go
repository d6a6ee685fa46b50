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

// baselineBinary builds the spade binary of git revision rev (BENCH_BASELINE,
// e.g. the commit a change starts from) from `git archive` into a temp dir,
// so the old code runs beside the new one in the same benchmark run; ""
// without BENCH_BASELINE.
func baselineBinary(b *testing.B) string {
	b.Helper()
	rev := os.Getenv("BENCH_BASELINE")
	if rev == "" {
		return ""
	}
	dir := b.TempDir()
	archive := exec.Command("sh", "-c", `git archive "$REV" | tar -x -C "$DIR"`)
	archive.Dir = repoRoot(b)
	archive.Env = append(os.Environ(), "REV="+rev, "DIR="+dir)
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(dir, "spade-baseline")
	build := exec.Command("go", "build", "-o", bin, "./cmd/spade")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build the baseline %s: %v\n%s", rev, err, out)
	}
	return bin
}

// playStats is what a trace of agent calls says about a rollout stage.
type playStats struct {
	// Plays and Calls count the plays (distinct seeds) and agent calls.
	Plays, Calls int
	// MeanInFlight is the calls' summed durations over the span from the
	// first arrival to the last answer; Window is the same while at least
	// P plays remained (NaN when fewer than P plays were made), and
	// WindowSeconds that window's length.
	MeanInFlight, Window, WindowSeconds float64
	// Chain is the longest play's summed latencies (seconds); Work the
	// summed latencies of every call over P (seconds); Bound the larger:
	// no schedule with P calls in flight finishes sooner.
	Chain, Work, Bound float64
	// LongestPlay is the most calls one play made.
	LongestPlay int
}

// analyzePlays computes playStats from the agent calls of one rollout
// stage run with P = model.concurrency. A play ends with its last call's
// answer; a play remains until then.
func analyzePlays(recs []traceRec, p int) playStats {
	var st playStats
	if len(recs) == 0 {
		return st
	}
	first, last := recs[0].Arrive, recs[0].Depart
	var busy int64
	chain := map[int64]int64{}
	calls := map[int64]int{}
	end := map[int64]int64{}
	for _, r := range recs {
		first, last = min(first, r.Arrive), max(last, r.Depart)
		d := r.Depart - r.Arrive
		busy += d
		chain[r.Seed] += d
		calls[r.Seed]++
		end[r.Seed] = max(end[r.Seed], r.Depart)
	}
	st.Plays, st.Calls = len(chain), len(recs)
	st.MeanInFlight = float64(busy) / float64(last-first)
	for s, c := range chain {
		st.Chain = max(st.Chain, float64(c)/1e9)
		st.LongestPlay = max(st.LongestPlay, calls[s])
	}
	st.Work = float64(busy) / 1e9 / float64(p)
	st.Bound = max(st.Chain, st.Work)
	ends := make([]int64, 0, len(end))
	for _, e := range end {
		ends = append(ends, e)
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	st.Window = -1
	if len(ends) >= p {
		// Fewer than p plays remain once len-p+1 plays have ended.
		wEnd := ends[len(ends)-p]
		var in int64
		for _, r := range recs {
			if a, d := r.Arrive, min(r.Depart, wEnd); d > a {
				in += d - a
			}
		}
		st.WindowSeconds = float64(wEnd-first) / 1e9
		if wEnd > first {
			st.Window = float64(in) / float64(wEnd-first)
		}
	}
	return st
}

// procTree is a poll of a process and its descendants.
type procTree struct {
	// Procs is the descendants' count; RSS and PSS their summed resident
	// and proportional set sizes in bytes (/proc/PID/smaps_rollup).
	Procs    int
	RSS, PSS int64
}

// descendants reads /proc for every descendant of root.
func descendants(root int) procTree {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[pid] = pp
		}
	}
	var t procTree
	for pid := range parent {
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p != root {
				continue
			}
			t.Procs++
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					f := strings.Fields(line)
					if len(f) >= 2 && (f[0] == "Rss:" || f[0] == "Pss:") {
						kb, _ := strconv.ParseInt(f[1], 10, 64)
						if f[0] == "Rss:" {
							t.RSS += kb << 10
						} else {
							t.PSS += kb << 10
						}
					}
				}
			}
			break
		}
	}
	return t
}

// stageRun is one `spade stage` process, measured.
type stageRun struct {
	wall, cpu time.Duration
	stageSecs float64 // the runner's "stage committed seconds="
	maxRSS    int64   // the spade process's peak VmHWM, bytes
	peak      procTree
}

// runStage runs `spade stage NAME --round R` with env against store,
// polling the process (VmHWM) and, with poll, its sandboxes every 100 ms.
func runStage(b *testing.B, bin, store string, env []string, poll bool, stage string, round int) stageRun {
	b.Helper()
	cmd := exec.Command(bin, "--store", "file://"+store, "--run", "bench", "--log-format", "text", "stage", stage, "--round", strconv.Itoa(round))
	cmd.Env = spadeEnviron(env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var run stageRun
	var err error
	run.wall, run.cpu = measure(b, func() {
		if err = cmd.Start(); err != nil {
			return
		}
		done := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				if hwm, err := vmHWM(cmd.Process.Pid); err == nil {
					run.maxRSS = max(run.maxRSS, hwm)
				}
				if poll {
					if pt := descendants(cmd.Process.Pid); pt.PSS > run.peak.PSS {
						run.peak = pt
					}
				}
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
		}()
		err = cmd.Wait()
		close(done)
		<-polled
	})
	if err != nil {
		b.Fatalf("spade stage %s: %v\n%s", stage, err, stderr.String())
	}
	sts, perr := ParseStageLog(&stderr)
	if perr != nil {
		b.Fatal(perr)
	}
	for _, st := range sts {
		if st.Stage == stage {
			run.stageSecs = st.Seconds
		}
	}
	return run
}

// writeTrace writes the agent calls of one measured stage to dir/NAME.txt
// (NAME with every run of characters other than letters, digits, '.' and
// '-' as one '_'), one line per call: arrival and answer time in Unix
// nanoseconds and the play's seed, for a look at calls in flight over
// time (BENCH_ORCH_TRACE=dir; docs/benchmarks.md section 7).
func writeTrace(b testing.TB, dir, name string, recs []traceRec) {
	b.Helper()
	var clean strings.Builder
	under := false
	for _, r := range name {
		ok := r == '.' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if ok {
			clean.WriteRune(r)
		} else if !under {
			clean.WriteByte('_')
		}
		under = !ok
	}
	var out bytes.Buffer
	for _, t := range recs {
		fmt.Fprintln(&out, t.Arrive, t.Depart, t.Seed)
	}
	if err := os.WriteFile(filepath.Join(dir, clean.String()+".txt"), out.Bytes(), 0o644); err != nil {
		b.Fatalf("BENCH_ORCH_TRACE: %v", err)
	}
}

// BenchmarkOrchestrationRound runs the default round (24 environments, 8 +
// 8 plays, up to 15 turns) with model.backend openai against a loopback
// server in its own process whose answers come after 300 ms, or after a
// long-tailed latency (log-normal, median 2 s, p99 10 s; the same request
// gets the same latency in every run), and measures the rollout stage
// (`spade stage rollout`, after the earlier stages ran one by one): the
// server's calls in flight over the stage and while at least
// model.concurrency plays remained, as a share of model.concurrency
// (target >= 90% at 128 and 300 ms); the stage's seconds against its bound
// max(longest play's summed latencies, all calls' latencies /
// concurrency) (target <= 2x); CPU per agent call (every process but the
// server's); and at concurrency 256 the spade process's peak RSS and the
// sandboxes' processes and memory at their peak. BENCH_BASELINE=REV also
// runs the 300 ms case with the spade binary of git revision REV
// (the old schedule), side by side in the same run. BENCH_ORCH_TRACE=DIR
// writes each measured stage's agent calls there (writeTrace).
func BenchmarkOrchestrationRound(b *testing.B) {
	bin := spadeBinary(b)
	type variant struct {
		name string
		bin  string
	}
	variants := []variant{{"this code", bin}}
	if old := baselineBinary(b); old != "" {
		variants = append(variants, variant{"baseline " + os.Getenv("BENCH_BASELINE"), old})
	}
	cases := []struct {
		spec        latencySpec
		concurrency int
		baseline    bool
		memory      bool
	}{
		{latencySpec{300 * time.Millisecond, 300 * time.Millisecond}, 128, true, false},
		{latencySpec{300 * time.Millisecond, 300 * time.Millisecond}, 256, false, true},
		{latencySpec{2 * time.Second, 10 * time.Second}, 128, false, false},
	}
	if v := os.Getenv("BENCH_ORCH_CASES"); v != "" {
		// A comma list of case numbers (1-based), to rerun a few.
		var keep []int
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > len(cases) {
				b.Fatalf("BENCH_ORCH_CASES=%q: %q is not a case number 1..%d", v, f, len(cases))
			}
			keep = append(keep, n-1)
		}
		var sel = cases[:0:0]
		for _, i := range keep {
			sel = append(sel, cases[i])
		}
		cases = sel
	}
	const s = "7. round orchestration against a model server"
	servers := map[latencySpec]*roundServer{}
	for range b.N {
		for _, c := range cases {
			srv := servers[c.spec]
			if srv == nil {
				srv = startRoundServer(b, c.spec)
				servers[c.spec] = srv
			}
			lat := "300 ms"
			if c.spec.P99 > c.spec.Median {
				lat = fmt.Sprintf("log-normal %s median, p99 %s", c.spec.Median, c.spec.P99)
			}
			for _, v := range variants {
				if v.bin != bin && !c.baseline {
					continue
				}
				env := []string{"SPADE_MODEL_BACKEND=openai", "SPADE_MODEL_BASE_URL=" + srv.URL, "SPADE_MODEL_NAME=" + "modeltest-1",
					"SPADE_MODEL_API_KEY_ENV=BENCH_NO_KEY", fmt.Sprintf("SPADE_MODEL_CONCURRENCY=%d", c.concurrency),
					"SPADE_MODEL_TIMEOUT_S=60"}
				store := b.TempDir()
				runStage(b, v.bin, store, env, false, "corpus", 0)
				seal := exec.Command(v.bin, "--store", "file://"+store, "--run", "bench", "commit", "--round", "0", "--stage", "corpus", "--seal")
				seal.Env = spadeEnviron(env...)
				if out, err := seal.CombinedOutput(); err != nil {
					b.Fatalf("spade commit --round 0 --seal: %v\n%s", err, out)
				}
				for _, st := range []string{"sample", "design", "validate", "hint"} {
					runStage(b, v.bin, store, env, false, st, 1)
				}
				_, cpu0 := srv.Trace(b) // drops the earlier stages' calls
				r := runStage(b, v.bin, store, env, c.memory, "rollout", 1)
				recs, cpu1 := srv.Trace(b)
				var agent []traceRec
				for _, t := range recs {
					if t.Role == "agent" {
						agent = append(agent, t)
					}
				}
				ps := analyzePlays(agent, c.concurrency)
				if dir := os.Getenv("BENCH_ORCH_TRACE"); dir != "" {
					writeTrace(b, dir, fmt.Sprintf("%s-c%d-%s", v.name, c.concurrency, lat), agent)
				}
				name := fmt.Sprintf("%s, concurrency %d, %s", v.name, c.concurrency, lat)
				note := fmt.Sprintf("%d plays, %d agent calls, longest play %d calls", ps.Plays, ps.Calls, ps.LongestPlay)
				target := Target{}
				if c.concurrency == 128 && c.spec.P99 == c.spec.Median && v.bin == bin {
					target = AtLeast(90)
				}
				if ps.Window >= 0 {
					rec.Add(s, name+": calls in flight / concurrency while >= concurrency plays remain", "%", []float64{100 * ps.Window / float64(c.concurrency)}, target,
						fmt.Sprintf("%.2f of %d over the first %.2f s; %s", ps.Window, c.concurrency, ps.WindowSeconds, note))
				}
				rec.Add(s, name+": calls in flight / concurrency over the stage", "%", []float64{100 * ps.MeanInFlight / float64(c.concurrency)}, Target{},
					fmt.Sprintf("%.2f of %d, first call to last answer", ps.MeanInFlight, c.concurrency))
				wt := Target{}
				if target.Op != "" {
					wt = AtMost(2)
				}
				rec.Add(s, name+": rollout stage seconds / bound", "x", []float64{r.stageSecs / ps.Bound}, wt,
					fmt.Sprintf("stage %.2f s (runner log), bound %.2f s = max(longest play %.2f s, calls x latency / concurrency %.2f s)", r.stageSecs, ps.Bound, ps.Chain, ps.Work))
				if ps.Calls > 0 {
					client := r.cpu - (cpu1 - cpu0)
					rec.Add(s, name+": CPU per agent call", "ms/call", []float64{float64(client.Microseconds()) / 1000 / float64(ps.Calls)}, Target{},
						fmt.Sprintf("spade and its sandboxes (cgroup minus the server's own CPU), %.2f CPU-s over %d calls", client.Seconds(), ps.Calls))
				}
				if c.memory {
					rec.Add(s, name+": peak RSS of the spade process", "MiB", []float64{float64(r.maxRSS) / (1 << 20)}, Target{}, "VmHWM")
					rec.Add(s, name+": sandbox processes at their memory peak", "processes", []float64{float64(r.peak.Procs)}, Target{},
						"descendants of the spade process (bubblewrap, zygote and program per slot)")
					rec.Add(s, name+": sandboxes' memory at its peak (PSS)", "MiB", []float64{float64(r.peak.PSS) / (1 << 20)}, Target{},
						fmt.Sprintf("RSS %.0f MiB; shared pages counted once in PSS", float64(r.peak.RSS)/(1<<20)))
				}
			}
		}
	}
}
