package design

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/prompt"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// TestDocExcerptChars pins the unit of DocExcerptChars: code points, not
// bytes. A document of exactly DocExcerptChars two-byte characters passes
// uncut; one more character cuts it to at most DocExcerptChars code points
// plus the " [...]" marker.
func TestDocExcerptChars(t *testing.T) {
	full := strings.Repeat("é", DocExcerptChars)
	require.Equal(t, full, prompt.Excerpt(full, DocExcerptChars), "2*DocExcerptChars bytes but DocExcerptChars code points: not cut")

	cut := prompt.Excerpt(full+"é", DocExcerptChars)
	require.True(t, strings.HasSuffix(cut, " [...]"))
	require.Equal(t, DocExcerptChars, utf8.RuneCountInString(strings.TrimSuffix(cut, " [...]")))
	require.True(t, utf8.ValidString(cut))
}

// scripted is a model.Backend answering every call with one choice and
// recording the requests.
type scripted struct {
	choice model.Choice
	reqs   []model.Request
}

func (s *scripted) Chat(_ context.Context, req model.Request) (model.Response, error) {
	s.reqs = append(s.reqs, req)
	return model.Response{Choices: []model.Choice{s.choice}}, nil
}

func (*scripted) Name() string { return "scripted" }

// TestCutAnswerFeedback: a designer answer cut at design.max_tokens is
// retried with feedback that says it was cut and names the setting, not
// "no Python code block"; its reasoning is kept apart from the response.
func TestCutAnswerFeedback(t *testing.T) {
	cfg := config.Default()
	cfg.Design.MaxAttempts, cfg.Design.MaxTokens = 2, 300
	b := &scripted{choice: model.Choice{Message: model.Message{Role: model.RoleAssistant, Content: "<think>A maze, then a grid of", Reasoning: "Plan first."}, FinishReason: "length"}}
	sl := schemas.Slot{SlotID: "r000001-s0000", Skill: "spatial_reasoning", Setting: "game", Kind: prompt.KindGame, Seed: 7}
	rows := generate(context.Background(), &cfg, b, nil, engine.NewLimiter(1), sl, []docRow{{DocID: "d", Title: "Cells", Domain: "biology", Text: "Cells divide."}}, nil)
	require.Len(t, rows, 2)
	for _, d := range rows {
		require.Equal(t, "length", d.FinishReason)
		require.Contains(t, d.Error, "cut at design.max_tokens (300 tokens")
		require.Equal(t, "Plan first.\n\nA maze, then a grid of", d.Reasoning)
		require.Empty(t, d.Source)
	}
	require.Len(t, b.reqs, 2)
	require.Equal(t, 300, b.reqs[0].MaxTokens)
	retry := b.reqs[1].Messages[1].Content
	require.Contains(t, retry, "cut off at the token limit (design.max_tokens = 300)")
	require.NotContains(t, retry, "contained no Python code block")

	// The Setting section is the theme from the documents' domains, never
	// the slot's setting word; the skill's description is shown for the
	// config's underscore name.
	first := b.reqs[0].Messages[1].Content
	require.Contains(t, first, "## Setting\nTheme: biology.")
	require.NotContains(t, first, "## Setting\ngame")
	require.Contains(t, first, prompt.SkillDescriptions["spatial reasoning"])
	require.Equal(t, "", theme([]docRow{{Domain: " "}}))
	require.Equal(t, "Theme: biology, physics. Set the environment in this field.", theme([]docRow{{Domain: "biology"}, {Domain: "Biology"}, {Domain: "physics"}}))
}
