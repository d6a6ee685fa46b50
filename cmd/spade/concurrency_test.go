package main

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// variantDesigner is modeltest's default handler with one environment per
// designer prompt (the prompt's grounding document names the variant), so
// every slot's environment has its own env_id: src (modeltest's
// DefaultEnvSource or one edited from it) with its variant in the task.
func variantDesigner(src string) modeltest.Handler {
	base := modeltest.DefaultHandler(src, modeltest.DefaultHint)
	return func(req modeltest.Request) modeltest.Reply {
		reply := base(req)
		if modeltest.Classify(req.Chat) != modeltest.RoleDesign {
			return reply
		}
		h := fnv.New32a()
		for _, m := range req.Chat.Messages {
			_, _ = h.Write([]byte(m.Content))
		}
		v := strings.Replace(src, "Reach the target total exactly.", fmt.Sprintf("Reach the target total exactly (variant %08x).", h.Sum32()), 1)
		for i := range reply.Choices {
			reply.Choices[i].Message.Content = "Here is the environment.\n\n```python\n" + v + "```\n"
		}
		return reply
	}
}

// variantTag is the variant (8 hex digits) that variantDesigner wrote into
// an environment's task, found in text, or "" when text names none.
func variantTag(text string) string {
	if i := strings.Index(text, "(variant "); i >= 0 && len(text) >= i+17 {
		return text[i+9 : i+17]
	}
	return ""
}

// openaiEnv points spade's model backend at srv.
func openaiEnv(srv *modeltest.Server) []string {
	return []string{"SPADE_MODEL_BACKEND=openai", "SPADE_MODEL_BASE_URL=" + srv.URL, "SPADE_MODEL_NAME=" + modeltest.DefaultModel, "SPADE_MODEL_API_KEY_ENV=MODELTEST_NO_KEY"}
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
					srv = modeltest.Start(t, modeltest.WithHandler(variantDesigner(modeltest.DefaultEnvSource)), modeltest.WithLatency(5*time.Millisecond), modeltest.WithoutRecording())
					env = append(env, openaiEnv(srv)...)
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

// TestCPUHeavyStepsAtHighConcurrency: every step burns 0.05 s of CPU under
// sandbox.call_timeout_s 1, and 64 of the round's 96 plays are in flight
// at once on workers 2. A play's resets and steps hold one of `workers`
// CPU places (engine.Engines.CPU; for 250 ms at most), so each step runs
// at its own pace, as under validation, and none times out. If all 64
// programs stepped at once, each step would take about 64 x 0.05 s / 2
// cores = 1.6 s and fail, and which ones failed would change with
// model.concurrency and the machine's load.
func TestCPUHeavyStepsAtHighConcurrency(t *testing.T) {
	heavy := strings.Replace(modeltest.DefaultEnvSource, "    def step(self, action):\n",
		"    def step(self, action):\n        _t = time.process_time()\n        while time.process_time() - _t < 0.05:\n            pass\n", 1)
	require.NotEqual(t, modeltest.DefaultEnvSource, heavy, "the step was not edited")
	heavy = "import time\n" + heavy
	srv := modeltest.Start(t, modeltest.WithHandler(variantDesigner(heavy)), modeltest.WithLatency(5*time.Millisecond), modeltest.WithoutRecording())
	env := append([]string{"SPADE_MODEL_CONCURRENCY=64", "SPADE_WORKERS=2", "SPADE_SANDBOX_CALL_TIMEOUT_S=1", "SPADE_ROLLOUT_GROUP_SIZE=8"}, openaiEnv(srv)...)
	dir := t.TempDir()
	r := spade(t, dir, env, "--config", smallConfig(t), "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	q := spade(t, dir, env, "--config", smallConfig(t), "sql", "--format", "csv",
		"select count(*), count(*) filter (where error <> ''), coalesce(min(nullif(error, '')), 'none') from rollouts")
	require.Equal(t, 0, q.code, q.stderr)
	lines := strings.Split(strings.TrimSpace(q.stdout), "\n")
	require.Len(t, lines, 2, q.stdout)
	f := strings.SplitN(lines[1], ",", 3)
	require.Len(t, f, 3, q.stdout)
	n, err := strconv.Atoi(f[0])
	require.NoError(t, err, q.stdout)
	require.GreaterOrEqual(t, n, 10, "were the environments valid?")
	require.Equal(t, "0", f[1], "plays failed: %s", f[2])
}

// TestUnavailableAfterFollowsTheServer: every agent prompt of one
// environment (the smallest variant tag the designer handed out) is
// answered HTTP 500, with model.max_retries 0 and model.unavailable_after 2.
// At concurrency 64 that environment's plays fail together, two in a row
// and more; the server answers its probe, so the stage goes on with the
// errors on those rows, as at concurrency 1, and the tables are the same.
func TestUnavailableAfterFollowsTheServer(t *testing.T) {
	var want map[string]string
	for _, c := range []int{1, 64} {
		base := variantDesigner(modeltest.DefaultEnvSource)
		var mu sync.Mutex
		failing := "" // the smallest tag designed so far
		h := func(req modeltest.Request) modeltest.Reply {
			role := modeltest.Classify(req.Chat)
			if role == modeltest.RoleAgent {
				mu.Lock()
				bad := failing
				mu.Unlock()
				for _, m := range req.Chat.Messages {
					if tg := variantTag(m.Content); tg != "" {
						if tg == bad {
							return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultServerError, Message: "cannot serve variant " + tg}}
						}
						break
					}
				}
			}
			reply := base(req)
			if tg := variantTag(reply.Choices[0].Message.Content); role == modeltest.RoleDesign && tg != "" {
				mu.Lock()
				if failing == "" || tg < failing {
					failing = tg
				}
				mu.Unlock()
			}
			return reply
		}
		srv := modeltest.Start(t, modeltest.WithHandler(h), modeltest.WithLatency(5*time.Millisecond), modeltest.WithoutRecording())
		env := append([]string{fmt.Sprintf("SPADE_MODEL_CONCURRENCY=%d", c), "SPADE_MODEL_MAX_RETRIES=0", "SPADE_MODEL_UNAVAILABLE_AFTER=2"}, openaiEnv(srv)...)
		dir := t.TempDir()
		r := spade(t, dir, env, "--config", smallConfig(t), "round", "1")
		require.Equal(t, 0, r.code, "concurrency %d: %s", c, r.stderr)
		q := spade(t, dir, env, "--config", smallConfig(t), "sql", "--format", "csv",
			"select count(distinct env_id) filter (where error like '%cannot serve variant%'), count(*) filter (where error <> '' and error not like '%cannot serve variant%') from rollouts")
		require.Equal(t, 0, q.code, q.stderr)
		require.Contains(t, q.stdout, "\n1,0", "one environment's plays failed, and only with the server's error")
		got := parquetFiles(t, dir)
		if want == nil {
			want = got
			continue
		}
		require.Equal(t, want, got, "the tables at concurrency %d differ from those at concurrency 1", c)
	}
}
