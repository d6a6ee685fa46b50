package main

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/stages/model/modeltest"
)

// variantDesigner is modeltest's default handler with one environment per
// designer prompt (the prompt's grounding document names the variant), so
// every slot's environment has its own env_id, and a latency that lets
// calls overlap.
func variantDesigner() modeltest.Handler {
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	return func(req modeltest.Request) modeltest.Reply {
		reply := base(req)
		if modeltest.Classify(req.Chat) != modeltest.RoleDesign {
			return reply
		}
		h := fnv.New32a()
		for _, m := range req.Chat.Messages {
			_, _ = h.Write([]byte(m.Content))
		}
		src := strings.Replace(modeltest.DefaultEnvSource, "Reach the target total exactly.", fmt.Sprintf("Reach the target total exactly (variant %08x).", h.Sum32()), 1)
		for i := range reply.Choices {
			reply.Choices[i].Message.Content = "Here is the environment.\n\n```python\n" + src + "```\n"
		}
		return reply
	}
}

// TestSameTablesAtAnyConcurrency: a round gives byte-identical Parquet
// files at model.concurrency 1, 16 and 256 with 1, 2 and 3 workers (the
// plays, designs and hints in flight change, and with them the order of
// every model call and sandbox load), against an OpenAI-compatible server
// on loopback (the openai backend's own concurrency bound in play) and
// with the procedural backend.
func TestSameTablesAtAnyConcurrency(t *testing.T) {
	cfg := smallConfig(t)
	for _, backend := range []string{"openai", "procedural"} {
		t.Run(backend, func(t *testing.T) {
			var want map[string]string
			for i, c := range []struct{ concurrency, workers int }{{1, 1}, {16, 2}, {256, 3}} {
				dir := t.TempDir()
				env := []string{fmt.Sprintf("SPADE_MODEL_CONCURRENCY=%d", c.concurrency), fmt.Sprintf("SPADE_WORKERS=%d", c.workers)}
				var srv *modeltest.Server
				if backend == "openai" {
					srv = modeltest.Start(t, modeltest.WithHandler(variantDesigner()), modeltest.WithLatency(5*time.Millisecond), modeltest.WithoutRecording())
					env = append(env, "SPADE_MODEL_BACKEND=openai", "SPADE_MODEL_BASE_URL="+srv.URL, "SPADE_MODEL_NAME="+modeltest.DefaultModel,
						"SPADE_MODEL_API_KEY_ENV=MODELTEST_NO_KEY")
				}
				r := spade(t, dir, env, "--config", cfg, "round", "1")
				require.Equal(t, 0, r.code, r.stderr)
				if srv != nil {
					// model.concurrency bounds the calls in flight, and the
					// workers do not: 6 environments' 48 plays overlap.
					require.LessOrEqual(t, srv.MaxInFlight(), c.concurrency)
					if c.concurrency > 1 {
						require.Greater(t, srv.MaxInFlight(), c.workers, "calls in flight at model.concurrency %d", c.concurrency)
					}
				}
				got := parquetFiles(t, dir)
				require.NotEmpty(t, got)
				if i == 0 {
					want = got
					// Every valid environment was played 4 + 4 times.
					q := spade(t, dir, env, "--config", cfg, "sql", "--format", "csv",
						"select count(*) filter (where valid) * 8 = (select count(*) from rollouts), count(*) filter (where valid) > 1 from environments")
					require.Equal(t, 0, q.code, q.stderr)
					require.Contains(t, q.stdout, "true,true")
					continue
				}
				require.Equal(t, want, got, "model.concurrency %d, workers %d: the tables differ from those at concurrency 1, workers 1", c.concurrency, c.workers)
			}
		})
	}
}
