package openai

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/stages/model"
	"github.com/spade-pipeline/spade/stages/model/modeltest"
)

// BenchmarkOrchestration measures how close the backend gets to the ideal
// throughput concurrency/latency against a server that answers after a
// fixed latency, and the CPU the process spends per call. The server runs
// in the same process, so cpu-us/call covers client and server together:
// an upper bound for the client alone. Run with e.g.
//
//	go test ./stages/model/openai -run '^$' -bench Orchestration -benchtime 4000x
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
			// Warm the connection pool so the measurement is steady state.
			warm(b, be, req, conc)

			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			start := time.Now()
			p := pool.New().WithErrors().WithMaxGoroutines(conc).WithContext(context.Background())
			for i := 0; i < b.N; i++ {
				p.Go(func(ctx context.Context) error {
					r := req
					r.Seed = int64(i)
					_, err := be.Chat(ctx, r)
					return err
				})
			}
			if err := p.Wait(); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)

			ideal := float64(conc) / latency.Seconds()
			achieved := float64(b.N) / elapsed.Seconds()
			cpu := tvDur(after.Utime) + tvDur(after.Stime) - tvDur(before.Utime) - tvDur(before.Stime)
			b.ReportMetric(achieved, "calls/s")
			b.ReportMetric(100*achieved/ideal, "%ideal")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/call")
			if srv.MaxInFlight() > conc {
				b.Fatalf("server saw %d in flight, Concurrency is %d", srv.MaxInFlight(), conc)
			}
		})
	}
}

func warm(b *testing.B, be *Backend, req model.Request, n int) {
	b.Helper()
	p := pool.New().WithErrors().WithMaxGoroutines(n)
	for i := 0; i < n; i++ {
		p.Go(func() error { _, err := be.Chat(context.Background(), req); return err })
	}
	if err := p.Wait(); err != nil {
		b.Fatal(err)
	}
}

func tvDur(tv syscall.Timeval) time.Duration {
	return time.Duration(tv.Sec)*time.Second + time.Duration(tv.Usec)*time.Microsecond
}
