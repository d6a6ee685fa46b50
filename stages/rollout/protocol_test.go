package rollout_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/all"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// protocolRound runs rounds 0 and 1 of a small game run against srv
// (model.backend openai), with cfgFn's changes, and returns the run's
// store and name.
func protocolRound(t *testing.T, name string, srvURL string, cfgFn func(*config.Config)) (storage.Store, string) {
	t.Helper()
	ctx := context.Background()
	cfg := config.Default()
	cfg.Seed, cfg.Workers = 3, 2
	cfg.Sample.Slots, cfg.Sample.Setting = 2, "game"
	cfg.Design.SlotsPerPart = 2
	cfg.Rollout.GroupSize, cfg.Rollout.EnvsPerPart = 8, 2
	cfg.Label.BandLow, cfg.Label.BandHigh = 0, 1
	cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srvURL, modeltest.DefaultModel
	cfg.Model.APIKeyEnv, cfg.Model.MaxRetries, cfg.Model.Concurrency = "PROTOCOL_TEST_UNSET_KEY", 0, 8
	if cfgFn != nil {
		cfgFn(&cfg)
	}
	require.NoError(t, cfg.Validate())
	t.Cleanup(func() { memstore.Forget(name) })
	st, err := storage.Open(ctx, "mem://"+name)
	require.NoError(t, err)
	eng := &engine.Engines{Config: &cfg, Store: st, Log: quiet}
	t.Cleanup(func() { _ = eng.Close() })
	r := &pipeline.Runner{Store: st, Run: "p", Config: cfg, Stages: all.Stages(eng), Log: quiet}
	for n := 0; n <= 1; n++ {
		_, err := r.RunRound(ctx, n)
		require.NoError(t, err, "round %d", n)
	}
	return st, "p"
}

// table reads every row of a committed table of round 1.
func table[P any](t *testing.T, st storage.Store, run, name string) []P {
	t.Helper()
	ctx := context.Background()
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey(run, 1, name))
	require.NoError(t, err, name)
	idx := make([]int64, m.Rows)
	for i := range idx {
		idx[i] = int64(i)
	}
	rows, err := pipeline.ReadRowsAt[P](ctx, st, m, idx)
	require.NoError(t, err, name)
	return rows
}

// unhintedWinRate is the share of round 1's unhinted plays won, as the
// labels count wins (success and no error).
func unhintedWinRate(t *testing.T, st storage.Store, run string) float64 {
	plays := table[schemas.Rollout](t, st, run, "rollouts")
	n, won := 0, 0
	for _, p := range plays {
		if p.Hinted {
			continue
		}
		n++
		if p.Success && p.Error == "" {
			won++
		}
	}
	require.Positive(t, n)
	return float64(won) / float64(n)
}

// TestReasoningServersPlayLikeBareOnes is the acceptance check: a
// server answering as Qwen3 with thinking on (a <think> block in the
// content, a sentence, then the action on its own line), one with a
// reasoning parser (reasoning_content), and boxed answers under
// action_format boxed all give round 1 the unhinted win rate of the same
// server answering with bare actions (within 0.05), and no action that
// reached env.step holds <think>.
func TestReasoningServersPlayLikeBareOnes(t *testing.T) {
	bare := modeltest.Start(t, modeltest.WithoutRecording())
	st, run := protocolRound(t, "protocol-bare", bare.URL, nil)
	base := unhintedWinRate(t, st, run)
	require.Greater(t, base, 0.0, "the bare server wins some plays, so the comparison means something")
	require.Less(t, base, 1.0)

	for _, tc := range []struct {
		name   string
		b      modeltest.Behaviour
		format string
		marker string // a text every reply carries, proving the behaviour
	}{
		{"think_in_content", modeltest.Behaviour{Think: true, Prose: true}, "valid_actions", "<think>"},
		{"reasoning_content", modeltest.Behaviour{ReasoningContent: true, Prose: true}, "valid_actions", "I will take"},
		{"boxed", modeltest.Behaviour{Think: true, Boxed: true}, "boxed", `\boxed{`},
		{"answer_tag", modeltest.Behaviour{ReasoningContent: true, AnswerTag: true}, "answer_tag", "<answer>"},
		{"weak", modeltest.Behaviour{Weak: true}, "valid_actions", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.Start(t, modeltest.WithoutRecording(), modeltest.WithBehaviour(tc.b))
			st, run := protocolRound(t, "protocol-"+tc.name, srv.URL, func(c *config.Config) { c.Rollout.ActionFormat = tc.format })
			wr := unhintedWinRate(t, st, run)
			require.InDelta(t, base, wr, 0.05, "unhinted win rate against %s vs bare actions", tc.name)
			plays := table[schemas.Rollout](t, st, run, "rollouts")
			require.NotEmpty(t, plays)
			for _, p := range plays {
				require.Empty(t, p.Error, "play %s/%v/%d", p.EnvID, p.Hinted, p.Sample)
				require.Zero(t, p.Unextracted, "every reply held an action")
				require.Len(t, p.Replies, len(p.Actions))
				for i, a := range p.Actions {
					require.NotContains(t, a, "<think>")
					require.Contains(t, []string{"add 1", "add 2", "add 3"}, a, "reply %q", p.Replies[i])
					if tc.marker != "" {
						require.Contains(t, p.Replies[i], tc.marker)
					}
				}
				if tc.b.Think || tc.b.ReasoningContent {
					var reasoned int
					for _, m := range p.Messages {
						if m.Role == "assistant" {
							require.NotContains(t, m.Content, "<think>", "the stored turn is the answer without its reasoning")
							if m.Reasoning != "" {
								reasoned++
							}
						}
					}
					require.Equal(t, len(p.Actions), reasoned, "every turn keeps its reasoning")
				}
			}
			if tc.b.Think || tc.b.ReasoningContent {
				calls := table[schemas.LLMCall](t, st, run, "rollout_calls")
				reasoning := 0
				for _, c := range calls {
					var resp model.Response
					require.NoError(t, json.Unmarshal([]byte(c.Response), &resp))
					if m := resp.Choices[0].Message; m.Reasoning != "" || strings.Contains(m.Content, "<think>") {
						reasoning++
					}
				}
				require.Equal(t, len(calls), reasoning, "rollout_calls keep every reply's reasoning")
				hints := table[schemas.Hint](t, st, run, "hints")
				for _, h := range hints {
					require.NotEmpty(t, h.Reasoning)
					require.NotContains(t, h.Hint, "<think>")
					require.Equal(t, "stop", h.FinishReason)
				}
				designs := table[schemas.Design](t, st, run, "designs")
				for _, d := range designs {
					require.NotEmpty(t, d.Reasoning)
					require.Equal(t, "stop", d.FinishReason)
				}
				// train_batch (grpo.train_reasoning generated): every agent
				// assistant turn is the generated text, reasoning included.
				batch := table[schemas.TrainSample](t, st, run, "train_batch")
				agent := 0
				for _, s := range batch {
					if s.Role != "agent" {
						continue
					}
					agent++
					for _, m := range s.Messages {
						require.Empty(t, m.Reasoning)
						if m.Role == "assistant" {
							require.True(t, strings.HasPrefix(m.Content, "<think>\n"), "turn %q", m.Content)
							require.NotEqual(t, "", strings.TrimSpace(m.Content))
						}
					}
				}
				require.Positive(t, agent)
			}
		})
	}
}

// TestCutRepliesAreNotAnswers: agent turns cut at rollout.max_tokens are
// never stepped and end their plays as agent failures; cut hints are
// errors, so their environments get no hinted arm; finish_reason is in
// rollouts, hints and designs.
func TestCutRepliesAreNotAnswers(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithoutRecording(), modeltest.WithBehaviour(modeltest.Behaviour{Think: true, Prose: true, CutAgentEvery: 4, CutHint: true}))
	st, run := protocolRound(t, "protocol-cut", srv.URL, nil)
	plays := table[schemas.Rollout](t, st, run, "rollouts")
	cut := 0
	for _, p := range plays {
		require.False(t, p.Hinted, "a cut hint is no hint: no hinted arm")
		require.Len(t, p.FinishReasons, len(p.Replies))
		if p.Termination == "agent_cut" {
			cut++
			require.Contains(t, p.Error, "agent: cut at max_tokens")
			require.Equal(t, "length", p.FinishReasons[len(p.FinishReasons)-1])
			require.Len(t, p.Actions, len(p.Replies)-1, "the cut reply was not stepped")
			require.EqualValues(t, len(p.Actions), p.Turns)
			require.False(t, p.Success)
		}
		for i, a := range p.Actions {
			require.NotContains(t, a, "<think>")
			require.Equal(t, "stop", p.FinishReasons[i])
		}
	}
	require.Positive(t, cut, "some turns were cut")
	hints := table[schemas.Hint](t, st, run, "hints")
	require.NotEmpty(t, hints)
	for _, h := range hints {
		require.Equal(t, "length", h.FinishReason)
		require.Contains(t, h.Error, "cut at hint.max_tokens")
		require.Empty(t, h.Hint)
	}
	for _, d := range table[schemas.Design](t, st, run, "designs") {
		require.Equal(t, "stop", d.FinishReason)
	}
}

// TestToolCallText: Qwen3's <tool_call> text in the content plays the
// tool; a server that refuses tool requests (vLLM without
// --enable-auto-tool-choice) fails every tool-use play with an error that
// names the flag.
func TestToolCallText(t *testing.T) {
	src, err := os.ReadFile("../../docs/examples/bank_tooluse.py")
	require.NoError(t, err)
	toolUse := func(c *config.Config) { c.Sample.Setting = "tool_use"; c.Rollout.GroupSize = 2 }

	srv := modeltest.Start(t, modeltest.WithoutRecording(), modeltest.WithEnvSource(string(src)),
		modeltest.WithBehaviour(modeltest.Behaviour{Think: true, ToolCallText: true}))
	st, run := protocolRound(t, "protocol-toolcall", srv.URL, toolUse)
	plays := table[schemas.Rollout](t, st, run, "rollouts")
	require.NotEmpty(t, plays)
	for _, p := range plays {
		require.Empty(t, p.Error)
		require.NotEmpty(t, p.Actions)
		for i, a := range p.Actions {
			var call struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			}
			require.NoError(t, json.Unmarshal([]byte(a), &call), "action %q from reply %q", a, p.Replies[i])
			require.NotEmpty(t, call.Name)
			require.Contains(t, p.Replies[i], "<tool_call>")
		}
		tools := 0
		for _, m := range p.Messages {
			if m.Role == "tool" {
				tools++
				require.NotEmpty(t, m.ToolCallID)
			}
		}
		require.EqualValues(t, p.Turns, tools, "every turn's observation answers a tool call")
	}

	refuse := modeltest.Start(t, modeltest.WithoutRecording(), modeltest.WithEnvSource(string(src)),
		modeltest.WithBehaviour(modeltest.Behaviour{RejectTools: true, VLLMErrors: true}))
	st, run = protocolRound(t, "protocol-notools", refuse.URL, toolUse)
	plays = table[schemas.Rollout](t, st, run, "rollouts")
	require.NotEmpty(t, plays)
	for _, p := range plays {
		require.Contains(t, p.Error, "--enable-auto-tool-choice")
		require.NotContains(t, p.Error, `"object"`, "the vLLM error body is unwrapped")
		require.Equal(t, "error", p.Termination)
	}
}

// quietEnv is a valid game whose observations never list their actions.
const quietEnv = `from spade_env import Env


class Quiet(Env):
    name = "quiet"
    max_turns = 3
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.turn = 0
        return "Say something.", {}

    def step(self, action):
        self.turn += 1
        done = self.turn >= self.max_turns
        return "Heard.", 0.0, done, False, {"success": False} if done else {}
`

// TestActionsLineAndSkippedChecks: under action_format valid_actions an
// environment without a "Valid actions:" line is invalid (reason
// actions_line) and the validations table holds exactly one failure for
// it, the checks after it skipped; under raw it is valid.
func TestActionsLineAndSkippedChecks(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithoutRecording(), modeltest.WithEnvSource(quietEnv))
	st, run := protocolRound(t, "protocol-actionsline", srv.URL, func(c *config.Config) { c.Sample.Slots, c.Rollout.GroupSize = 1, 1 })
	envs := table[schemas.Environment](t, st, run, "environments")
	require.Len(t, envs, 1)
	require.False(t, envs[0].Valid)
	require.Equal(t, "actions_line", envs[0].Reason)
	failed, skipped := 0, 0
	for _, v := range table[schemas.Validation](t, st, run, "validations") {
		switch {
		case !v.Passed && !v.Skipped:
			failed++
			require.Equal(t, "actions_line", v.Check)
		case v.Skipped:
			skipped++
			require.False(t, v.Passed)
			require.Contains(t, v.Detail, "not completed: check actions_line failed first")
		}
	}
	require.Equal(t, 1, failed, "one failure, the checks after it skipped")
	require.Positive(t, skipped)

	st, run = protocolRound(t, "protocol-actionsline-raw", srv.URL, func(c *config.Config) {
		c.Sample.Slots, c.Rollout.GroupSize, c.Rollout.ActionFormat = 1, 1, "raw"
	})
	envs = table[schemas.Environment](t, st, run, "environments")
	require.Len(t, envs, 1)
	require.True(t, envs[0].Valid, envs[0].Reason)
}
