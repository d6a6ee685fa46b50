package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/engines/sandbox"
)

const sandboxReps = 5

// sandboxFixedCosts measures the two fixed costs a validation or a play
// pays, in CPU milliseconds: a fresh program of source counter and one
// more episode of a loaded one; split out of BenchmarkSandbox.
func sandboxFixedCosts(b *testing.B, ctx context.Context, sb *sandbox.Sandbox, counter string) (prog, ep float64) {
	// The two fixed costs a validation or a play pays: a fresh
	// program (sandbox start, interpreter, load, one episode,
	// close) and one more episode of a loaded program (fork,
	// reset, one step, close).
	const programs, episodes = 10, 50
	_, c := measure(b, func() {
		for range programs {
			p, err := sb.Load(ctx, counter)
			if err != nil {
				b.Fatal(err)
			}
			e, err := p.Reset(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			e.Close()
			p.Close()
		}
	})
	prog = float64(c.Microseconds()) / 1000 / programs
	p, err := sb.Load(ctx, counter)
	if err != nil {
		b.Fatal(err)
	}
	_, c = measure(b, func() {
		for i := range episodes {
			e, err := p.Reset(ctx, int64(i))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.Step(ctx, "add1"); err != nil {
				b.Fatal(err)
			}
			e.Close()
		}
	})
	p.Close()
	return prog, float64(c.Microseconds()) / 1000 / episodes
}

// sandboxStepRate measures steps steps of counter spread over workers
// loaded programs, returning steps per wall-clock second and CPU
// microseconds per step; split out of BenchmarkSandbox.
func sandboxStepRate(b *testing.B, ctx context.Context, sb *sandbox.Sandbox, counter string, steps, workers int) (float64, float64) {
	eps := make([]*sandbox.Episode, workers)
	progs := make([]*sandbox.Program, workers)
	var err error
	for i := range workers {
		if progs[i], err = sb.Load(ctx, counter); err != nil {
			b.Fatal(err)
		}
		if eps[i], err = progs[i].Reset(ctx, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	wall, c := measure(b, func() {
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				for range steps / workers {
					if _, err := eps[i].Step(ctx, "add1"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	for i := range workers {
		eps[i].Close()
		progs[i].Close()
	}
	return float64(steps) / wall.Seconds(), float64(c.Microseconds()) / float64(steps)
}

// BenchmarkSandbox measures, in one run: step() throughput of a trivial
// environment (engines/sandbox/testdata/counter.py) on two sandboxed
// programs; a process-per-call executor on the same environment; and full
// validations (envcheck.Check of docs/examples/guess_game.py), one at a
// time and two at a time. Besides wall-clock rates it reports CPU per operation including
// the sandboxed Python processes (CPUMeter) and the rate that cost allows
// on all of the machine's cores. Targets (issue "Benchmarks and scale"):
// >= 20,000 steps/s, >= 100x process-per-call, >= 50 validations/s.
func BenchmarkSandbox(b *testing.B) {
	root := repoRoot(b)
	counterPath := filepath.Join(root, "engines/sandbox/testdata/counter.py")
	counter, err := os.ReadFile(counterPath)
	if err != nil {
		b.Fatal(err)
	}
	guess, err := os.ReadFile(filepath.Join(root, "docs/examples/guess_game.py"))
	if err != nil {
		b.Fatal(err)
	}
	const python = "/usr/bin/python3"
	sb, err := sandbox.New(sandbox.Config{Workers: 2, Python: python})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	ctx := context.Background()
	cores := float64(ReadMachine().NumCPU)
	for range b.N {
		const steps, workers = 20000, 2
		var rate, cpuStep, perCallRate, cpuCall, vRate, cpuVal, vRate1, cpuVal1, cpuProg, cpuEp []float64
		for range sandboxReps {
			prog, ep := sandboxFixedCosts(b, ctx, sb, string(counter))
			cpuProg, cpuEp = append(cpuProg, prog), append(cpuEp, ep)
			r, cs := sandboxStepRate(b, ctx, sb, string(counter), steps, workers)
			rate, cpuStep = append(rate, r), append(cpuStep, cs)

			const calls = 10
			wall, c := measure(b, func() {
				p := pool.New().WithMaxGoroutines(workers)
				for range calls {
					p.Go(func() {
						out, err := exec.Command(python, "-S", filepath.Join(root, "engines/sandbox/testdata/process_per_call.py"), filepath.Join(root, "engines/sandbox/python"), counterPath).Output()
						var res []any
						if err != nil || json.Unmarshal(out, &res) != nil || len(res) != 5 {
							b.Errorf("process-per-call: output %q: %v", out, err)
						}
					})
				}
				p.Wait()
			})
			perCallRate = append(perCallRate, calls/wall.Seconds())
			cpuCall = append(cpuCall, float64(c.Microseconds())/calls)

			// Validations one at a time (one slot busy) and two at a time
			// (both slots): on the benchmark machine the second slot adds
			// little, as the page-table work of forked program processes
			// does not scale across its cores (docs/benchmarks.md).
			const validations = 20
			for _, par := range []int{1, workers} {
				wall, c = measure(b, func() {
					p := pool.New().WithMaxGoroutines(par)
					for range validations {
						p.Go(func() {
							if rep := envcheck.Check(ctx, sb, string(guess), envcheck.Options{}); !rep.Valid {
								b.Errorf("guess_game.py invalid: %s", rep.Reason)
							}
						})
					}
					p.Wait()
				})
				if par == 1 {
					vRate1 = append(vRate1, validations/wall.Seconds())
					cpuVal1 = append(cpuVal1, float64(c.Microseconds())/1000/validations)
					continue
				}
				vRate = append(vRate, validations/wall.Seconds())
				cpuVal = append(cpuVal, float64(c.Microseconds())/1000/validations)
			}
		}
		ratio := make([]float64, len(rate))
		cpuRatio := make([]float64, len(rate))
		bound := make([]float64, len(rate))
		vBound := make([]float64, len(rate))
		for i := range rate {
			ratio[i] = rate[i] / perCallRate[i]
			cpuRatio[i] = cpuCall[i] / cpuStep[i]
			bound[i] = cores * 1e6 / cpuStep[i]
			vBound[i] = cores * 1e3 / cpuVal[i]
		}
		const s = "1. sandbox"
		rec.Add(s, "step() of counter.py, 2 programs, wall clock", "steps/s", rate, AtLeast(20000), "20,000 steps per repetition")
		rec.Add(s, "step() CPU cost (Go + sandboxed Python)", "µs/step", cpuStep, Target{}, "")
		rec.Add(s, "step() rate the CPU cost allows on all cores", "steps/s", bound, AtLeast(20000), "cores / CPU per step")
		rec.Add(s, "process-per-call executor (fresh python3 -S, no bwrap), wall clock", "calls/s", perCallRate, Target{}, "10 calls, 2 at a time")
		rec.Add(s, "process-per-call CPU cost", "µs/call", cpuCall, Target{}, "")
		rec.Add(s, "sandbox vs process-per-call, wall clock, same repetition", "x", ratio, AtLeast(100), "")
		rec.Add(s, "sandbox vs process-per-call, CPU per operation", "x", cpuRatio, AtLeast(100), "")
		rec.Add(s, "fresh program (sandbox start, load, one episode, close) CPU cost", "ms/program", cpuProg, Target{}, "10 per repetition")
		rec.Add(s, "one more episode of a loaded program (fork, reset, step, close) CPU cost", "ms/episode", cpuEp, Target{}, "50 per repetition")
		rec.Add(s, "validations of guess_game.py, 1 at a time, wall clock", "validations/s", vRate1, Target{}, "20 per repetition")
		rec.Add(s, "validation CPU cost, 1 at a time", "ms/validation", cpuVal1, Target{}, "")
		rec.Add(s, "validations of guess_game.py, 2 at a time, wall clock", "validations/s", vRate, AtLeast(50), "20 per repetition")
		rec.Add(s, "validation CPU cost, 2 at a time", "ms/validation", cpuVal, Target{}, "")
		rec.Add(s, "validation rate the CPU cost allows on all cores", "validations/s", vBound, AtLeast(50), "cores / CPU per validation")
	}
}
