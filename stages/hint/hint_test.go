package hint_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/hint"
)

// envFixture writes the hint stage's input, the environments table, on
// regeneration rounds, as the validate stage would.
type envFixture struct{ envs []schemas.Environment }

func (*envFixture) Name() string { return "fixture" }
func (*envFixture) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "environments"}}
}
func (*envFixture) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round >= 1 && ri.Regeneration
}
func (*envFixture) ConfigSubset(*config.Config) any                   { return nil }
func (*envFixture) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (f *envFixture) Run(_ context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	pipeline.Emit(out, schemas.Environments, "environments", f.envs...)
	return nil
}

func readTable[T any](t *testing.T, st storage.Store, tbl schemas.Table[T], name, run string, round int) []T {
	t.Helper()
	ctx := context.Background()
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey(run, round, name))
	require.NoError(t, err)
	rows, err := pipeline.ReadManifestRows(ctx, st, tbl, m)
	require.NoError(t, err)
	return rows
}

// userText is the user message of a chat request (the hint prompt, which
// carries the environment's source).
func userText(req model.Request) string {
	for _, m := range req.Messages {
		if m.Role == model.RoleUser {
			return m.Content
		}
	}
	return ""
}

// TestHintRows runs the hint stage through the runner at round 1 against
// an OpenAI-compatible test server (model.backend openai) and checks each
// kind of hints row:
//   - a response longer than MaxHintBytes whose multi-byte character
//     straddles the limit is trimmed, then cut before that character, so
//     the hint is valid UTF-8 of MaxHintBytes-1 bytes, while Response
//     keeps the raw answer;
//   - a trimmed response of exactly MaxHintBytes bytes ending in a
//     multi-byte character is kept whole;
//   - a failed model call gives a "model: " row with the prompt and no
//     hint or response;
//   - a blank answer gives a "model: empty answer" row with the raw
//     response and no hint;
//   - a blank source gives a "prompt: " row and no model call;
//   - an invalid environment gets no row and no call.
//
// It also checks what each call asked for: model.temperature and 512
// tokens.
func TestHintRows(t *testing.T) {
	ctx := context.Background()
	// 'a' * (MaxHintBytes-1), then "é" (2 bytes: MaxHintBytes-1 and
	// MaxHintBytes, 0-based), so the byte at index MaxHintBytes is a
	// continuation byte and the cut must step back to MaxHintBytes-1.
	long := strings.Repeat("a", hint.MaxHintBytes-1) + "é" + " and more advice"
	longRaw := "\n  " + long + "  \n"
	exact := strings.Repeat("b", hint.MaxHintBytes-2) + "é"
	require.Len(t, exact, hint.MaxHintBytes)

	srv := modeltest.Start(t, modeltest.WithHandler(func(req modeltest.Request) modeltest.Reply {
		text := userText(req.Chat)
		switch {
		case strings.Contains(text, "class LongHint"):
			return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: longRaw}}}}
		case strings.Contains(text, "class ExactHint"):
			return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: " " + exact + "\n"}}}}
		case strings.Contains(text, "class EmptyHint"):
			// A reasoning model that spent max_tokens before answering.
			return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: " \n\t"}, FinishReason: "length"}}}
		case strings.Contains(text, "class FailHint"):
			return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: "hint refused by the test server"}}
		}
		t.Errorf("unexpected request, user message %q", text)
		return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: "unexpected"}}
	}))

	cfg := config.Default()
	cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "hint-test"
	cfg.Model.APIKeyEnv = "SPADE_HINT_TEST_UNSET_KEY"
	cfg.Model.MaxRetries = 0
	cfg.Hint.Temperature = 0.7
	cfg.Model.Concurrency = 2

	name := "hint-rows"
	t.Cleanup(func() { memstore.Forget(name) })
	st, err := storage.Open(ctx, "mem://"+name)
	require.NoError(t, err)
	eng := &engine.Engines{Config: &cfg, Store: st}
	t.Cleanup(func() { _ = eng.Close() })

	env := func(id, source string, valid bool) schemas.Environment {
		return schemas.Environment{EnvID: id, SlotID: "r000001-s0000", Skill: "planning", Setting: "game", Kind: "game", Source: source, Valid: valid}
	}
	f := &envFixture{envs: []schemas.Environment{
		env("e-blank", " \n\t\n", true),
		env("e-empty", "class EmptyHint:\n    pass\n", true),
		env("e-exact", "class ExactHint:\n    pass\n", true),
		env("e-fail", "class FailHint:\n    pass\n", true),
		env("e-invalid", "class InvalidHint:\n    pass\n", false),
		env("e-long", "class LongHint:\n    pass\n", true),
	}}
	r := &pipeline.Runner{Store: st, Run: "h", Config: cfg, Stages: []pipeline.Stage{&hint.Stage{Eng: eng}, f}}
	for round := 0; round <= 1; round++ {
		_, err := r.RunRound(ctx, round)
		require.NoError(t, err, "round %d", round)
	}

	rows := readTable(t, st, schemas.Hints, "hints", "h", 1)
	byID := map[string]schemas.Hint{}
	for _, h := range rows {
		byID[h.EnvID] = h
	}
	require.Len(t, rows, 5, "one row per valid environment")
	require.NotContains(t, byID, "e-invalid")

	lh := byID["e-long"]
	require.Empty(t, lh.Error)
	require.Equal(t, "openai:hint-test", lh.Model)
	require.Equal(t, longRaw, lh.Response, "Response keeps the raw answer")
	require.Equal(t, strings.Repeat("a", hint.MaxHintBytes-1), lh.Hint, "cut before the character that crosses MaxHintBytes")
	require.True(t, utf8.ValidString(lh.Hint))
	require.Contains(t, lh.Prompt, "class LongHint")

	eh := byID["e-exact"]
	require.Empty(t, eh.Error)
	require.Equal(t, exact, eh.Hint, "a trimmed hint of exactly MaxHintBytes bytes is not cut")

	fh := byID["e-fail"]
	require.True(t, strings.HasPrefix(fh.Error, "model: "), "error %q", fh.Error)
	require.Contains(t, fh.Error, "HTTP 400")
	require.Contains(t, fh.Error, "hint refused by the test server")
	require.Empty(t, fh.Hint)
	require.Empty(t, fh.Response)
	require.Contains(t, fh.Prompt, "class FailHint", "the prompt is kept when the call fails")

	// An answer with no hint text is a failed call on its row, not a
	// silent empty hint.
	mh := byID["e-empty"]
	require.Equal(t, `model: cut at hint.max_tokens (512; finish_reason length)`, mh.Error, "an answer cut at max_tokens is an error, empty or not")
	require.Equal(t, "length", mh.FinishReason)
	require.Empty(t, mh.Hint)
	require.Equal(t, " \n\t", mh.Response, "Response keeps the raw answer")

	bh := byID["e-blank"]
	require.True(t, strings.HasPrefix(bh.Error, "prompt: "), "error %q", bh.Error)
	require.Contains(t, bh.Error, "environment source is empty")
	require.Empty(t, bh.Prompt)
	require.Empty(t, bh.Hint)
	require.Empty(t, bh.Response)

	// Four calls: long, exact, empty and fail; none for the blank source
	// or the invalid environment.
	reqs := srv.Requests()
	require.Len(t, reqs, 4)
	for _, q := range reqs {
		require.InDelta(t, 0.7, q.Chat.Temperature, 0, "model.temperature is sent on hint calls")
		require.Equal(t, 512, q.Chat.MaxTokens)
	}
	calls := readTable(t, st, schemas.LLMCalls, "hint_calls", "h", 1)
	require.Len(t, calls, 4, "every call is recorded, the failed one too")
	failed := 0
	for _, c := range calls {
		require.Equal(t, "hint", c.Stage)
		if c.Error != "" {
			failed++
		}
	}
	require.Equal(t, 1, failed)
}
