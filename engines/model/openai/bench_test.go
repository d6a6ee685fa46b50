package openai

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// BenchmarkOrchestration measures how close the backend gets to the ideal
// throughput concurrency/latency against a server that answers after a
// fixed latency, and the CPU the process spends per call, in steady state
// (modeltest.Load). The server runs in the same process, so cpu-us/call
// covers client and server together: an upper bound for the client alone.
// Run with e.g.
//
//	go test ./engines/model/openai -run '^$' -bench Orchestration -benchtime 4000x
func BenchmarkOrchestration(b *testing.B) {
	const latency = 50 * time.Millisecond
	for _, conc := range []int{64, 256} {
		b.Run(fmt.Sprintf("conc=%d/latency=%s", conc, latency), func(b *testing.B) {
			srv, err := modeltest.New(modeltest.WithLatency(latency), modeltest.WithoutRecording(),
				modeltest.WithHandler(func(modeltest.Request) modeltest.Reply {
					return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: "add 3"}}}}
				}))
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			be, err := New(Config{BaseURL: srv.URL, Model: "bench", APIKeyEnv: "SPADE_BENCH_NO_KEY", Concurrency: conc, Timeout: 30 * time.Second, MaxRetries: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			req := model.Request{
				Messages: []model.Message{
					{Role: model.RoleSystem, Content: "You are playing a text game. Answer with one valid action."},
					{Role: model.RoleUser, Content: "Total: 4. Target: 17. Turns left: 12.\nValid actions: add 1 | add 2 | add 3"},
				},
				Temperature: 1, MaxTokens: 32,
			}
			// Steady state: b.N calls (rounded up to whole rounds of conc)
			// after 4 rounds of warm-up, timed between completions (see
			// modeltest.Load), CPU read at the same two completions.
			calls := (b.N + conc - 1) / conc * conc
			var ru [2]syscall.Rusage
			load := modeltest.Load{Concurrency: conc, Warmup: 4 * conc, Calls: calls,
				Call: func(seq int64) error {
					r := req
					r.Seed = seq
					_, err := be.Chat(context.Background(), r)
					return err
				},
				Edge: func(end bool) {
					i := 0
					if end {
						i = 1
					}
					_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru[i])
				}}
			b.ResetTimer()
			wall, err := load.Run()
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}

			ideal := float64(conc) / latency.Seconds()
			achieved := float64(calls) / wall.Seconds()
			cpu := tvDur(ru[1].Utime) + tvDur(ru[1].Stime) - tvDur(ru[0].Utime) - tvDur(ru[0].Stime)
			b.ReportMetric(float64(wall.Nanoseconds())/float64(calls), "ns/op")
			b.ReportMetric(achieved, "calls/s")
			b.ReportMetric(100*achieved/ideal, "%ideal")
			b.ReportMetric(float64(cpu.Microseconds())/float64(calls), "cpu-us/call")
			if srv.MaxInFlight() > conc {
				b.Fatalf("server saw %d in flight, Concurrency is %d", srv.MaxInFlight(), conc)
			}
		})
	}
}

func tvDur(tv syscall.Timeval) time.Duration {
	return time.Duration(tv.Sec)*time.Second + time.Duration(tv.Usec)*time.Microsecond
}
