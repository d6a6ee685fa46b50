package prompt

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func fixtureInput() Input {
	long := strings.Repeat("Enzymes lower the activation energy of a reaction without being consumed. ", 40)
	return Input{
		Skill:   "Causal inference",
		Setting: "A biochemistry teaching lab.",
		Docs: []Doc{
			{ID: "doc-17", Title: "Enzyme kinetics\n(Michaelis-Menten)", Text: long},
			{ID: "doc-42", Title: "Competitive inhibition", Text: "A competitive inhibitor binds the active site and raises the apparent Km while Vmax is unchanged."},
		},
		Seeds: []Seed{
			{Name: "valve_network", Skill: "causal inference", Description: "Find which hidden valves feed which tanks by opening them one at a time.", WinRate: 0.45, Regret: 0.375,
				Source: "from spade_env import Env\n\n\nclass ValveNetwork(Env):\n    name = \"valve_network\"\n"},
		},
		Negatives: []Seed{
			{Name: "guess_color", Description: "Guess a colour from a list.", WinRate: 0.97, Regret: 0.01},
			{Name: "maze_xl", Description: "A 40x40 maze with no map.", WinRate: 0.0, Regret: 0},
		},
		ExcerptChars: 300,
	}
}

func renderText(msgs []model.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("=== " + m.Role + " ===\n" + m.Content + "\n")
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), got, "prompt changed; review the diff and rerun with -update if intended")
}

func TestRenderGolden(t *testing.T) {
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) {
			msgs, err := Render(kind, fixtureInput())
			require.NoError(t, err)
			require.Len(t, msgs, 2)
			assert.Equal(t, model.RoleSystem, msgs[0].Role)
			assert.Equal(t, model.RoleUser, msgs[1].Role)
			golden(t, "design_"+kind, renderText(msgs))
		})
	}
	t.Run("retry feedback", func(t *testing.T) {
		in := fixtureInput()
		in.Seeds, in.Negatives, in.Docs = nil, nil, nil
		in.Skill = "planning"
		in.Feedback = "validation failed: step() raised ValueError on action 'jump'"
		in.PreviousSource = "from spade_env import Env\r\n\r\nclass Broken(Env):   \r\n    pass\r\n"
		msgs, err := Render(KindGame, in)
		require.NoError(t, err)
		golden(t, "design_game_retry", renderText(msgs))
	})
}

func TestRenderCarriesContract(t *testing.T) {
	common := []string{
		"from spade_env import Env", "max_turns = 15", "reward_range = (0.0, 1.0)",
		"reset(self, seed=None) -> (observation: str, info: dict)", "super().reset(seed)",
		"self.rng = random.Random(seed)", "step(self, action: str)", "terminated", "truncated",
		`info["success"]`, "Valid actions: a | b | c", "never raise an exception",
		"exactly one Python code block", "Causal inference", "working out what causes what",
		"Enzyme kinetics (Michaelis-Menten)", "Competitive inhibition", "valve_network (win rate 0.45, regret 0.38)",
		"guess_color (win rate 0.97, too easy)", "maze_xl (win rate 0.00, too hard or broken)",
		"A biochemistry teaching lab.",
	}
	perKind := map[string][]string{
		KindReasoning: {"single `step`", "single-turn"},
		KindGame:      {"at least two meaningful actions", "10 to 15 turns", "won or lost"},
		KindGrounded:  {"hidden state", "partial rewards", "never be a one-shot question", "Never name or cite the source document"},
		KindToolUse:   {"ToolUseEnv", "3 to 5", "one at a time", "initial_state(self) -> dict", "instructions(self)", "tool_<name>(self, **arguments) -> str", `{"name": "<tool>", "arguments": {...}}`, "criterion"},
	}
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) {
			msgs, err := Render(kind, fixtureInput())
			require.NoError(t, err)
			text := renderText(msgs)
			for _, s := range append(common, perKind[kind]...) {
				assert.Contains(t, text, s)
			}
			assert.NotContains(t, text, "doc-17", "corpus ids are not shown")
			assert.NotContains(t, text, "<no value>")
			again, err := Render(kind, fixtureInput())
			require.NoError(t, err)
			assert.Equal(t, msgs, again, "rendering must be deterministic")
			// The test server recognises designer prompts by their text.
			assert.Equal(t, modeltest.RoleDesign, modeltest.Classify(model.Request{Messages: msgs}))
		})
	}
}

func TestRenderBoundsExcerpts(t *testing.T) {
	in := fixtureInput()
	in.ExcerptChars = 120
	in.SeedSourceChars = 30
	msgs, err := Render(KindGame, in)
	require.NoError(t, err)
	user := msgs[1].Content
	start := strings.Index(user, "### Document 1: ")
	require.GreaterOrEqual(t, start, 0)
	rest := user[start:]
	rest = rest[strings.Index(rest, "\n")+1:]
	excerpt := rest[:strings.Index(rest, "\n")]
	assert.LessOrEqual(t, utf8.RuneCountInString(excerpt), 120+len(" [...]"))
	assert.True(t, strings.HasSuffix(excerpt, " [...]"))
	assert.Contains(t, user, "from spade_env import Env [...]")

	in.SeedSourceChars = -1
	msgs, err = Render(KindGame, in)
	require.NoError(t, err)
	assert.NotContains(t, msgs[1].Content, "class ValveNetwork")
}

func TestRenderErrors(t *testing.T) {
	cases := []struct {
		name string
		kind string
		mod  func(*Input)
		is   error
		want string
	}{
		{"unknown kind", "puzzle", func(*Input) {}, ErrUnknownKind, `"puzzle"`},
		{"no skill", KindGame, func(in *Input) { in.Skill = "  " }, ErrMissingInput, "field Skill"},
		{"grounded without docs", KindGrounded, func(in *Input) { in.Docs = nil }, ErrMissingInput, "field Docs"},
		{"kind mismatch", KindGame, func(in *Input) { in.Kind = KindToolUse }, ErrMissingInput, "field Kind"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := fixtureInput()
			tc.mod(&in)
			_, err := Render(tc.kind, in)
			require.True(t, errors.Is(err, tc.is), "got %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestRenderHint(t *testing.T) {
	msgs, err := RenderHint(modeltest.DefaultEnvSource, KindGame, "planning")
	require.NoError(t, err)
	golden(t, "hint", renderText(msgs))
	assert.Contains(t, msgs[1].Content, "class ReachTarget(Env):")
	assert.Equal(t, modeltest.RoleHint, modeltest.Classify(model.Request{Messages: msgs}))

	_, err = RenderHint(" \n\t", "", "")
	require.ErrorIs(t, err, ErrMissingInput)

	huge := strings.Repeat("x = 1\n", MaxHintSourceChars)
	msgs, err = RenderHint(huge, "", "")
	require.NoError(t, err)
	assert.Less(t, len(msgs[1].Content), MaxHintSourceChars+2000)
}

func TestAgentSystem(t *testing.T) {
	cases := []struct {
		name    string
		hint    string
		toolUse bool
		format  string
	}{
		{"text", "", false, "valid_actions"},
		{"text_hint", "Add 3 while the gap exceeds 3.", false, "valid_actions"},
		{"text_boxed", "", false, "boxed"},
		{"text_answer_tag", "", false, "answer_tag"},
		{"text_raw", "", false, "raw"},
		{"tooluse", "", true, "valid_actions"},
		{"tooluse_hint", "Look up the order before refunding it.", true, "boxed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := AgentSystem(tc.hint, tc.toolUse, tc.format)
			switch {
			case tc.toolUse:
				assert.Contains(t, s, "call exactly one tool")
			case tc.format == "boxed":
				assert.Contains(t, s, `\boxed{}`, "the prompt asks for the form the reply is parsed in")
			case tc.format == "answer_tag":
				assert.Contains(t, s, "<answer>a</answer>")
			case tc.format == "raw":
				assert.Contains(t, s, "your whole reply is taken as your action")
			default:
				assert.Contains(t, s, "alone on the last line")
			}
			golden(t, "agent_system_"+tc.name, s+"\n")
			if tc.hint != "" {
				assert.Contains(t, s, tc.hint)
			} else {
				assert.NotContains(t, s, "Hint")
			}
			assert.Equal(t, modeltest.RoleAgent, modeltest.Classify(model.Request{Messages: []model.Message{{Role: model.RoleSystem, Content: s}}}))
		})
	}
}

func TestDefaultServerAnswerExtracts(t *testing.T) {
	// The test server's designer answer must survive extraction unchanged,
	// so pipeline tests against it see DefaultEnvSource.
	msgs, err := Render(KindGame, fixtureInput())
	require.NoError(t, err)
	reply := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)(modeltest.Request{Chat: model.Request{Messages: msgs}})
	code, err := ExtractCode(reply.Choices[0].Message.Content)
	require.NoError(t, err)
	assert.Equal(t, NormalizeSource(modeltest.DefaultEnvSource), code)
}

func TestExcerpt(t *testing.T) {
	assert.Equal(t, "", Excerpt("abc", 0))
	assert.Equal(t, "abc", Excerpt("abc", 3))
	assert.Equal(t, "hello world [...]", Excerpt("hello world again", 12), "cut at a space near the limit")
	assert.Equal(t, "hello wo [...]", Excerpt("hello world", 8), "no space in the last fifth: hard cut")
	assert.Equal(t, "ééééé [...]", Excerpt("éééééé", 5))
}

// TestSkillDescriptionConfigNames: sample.skills names skills with
// underscores (spatial_reasoning); the prompt must still carry the
// skill's description.
func TestSkillDescriptionConfigNames(t *testing.T) {
	for _, skill := range []string{"spatial_reasoning", "Spatial Reasoning", "spatial-reasoning", "spatial reasoning"} {
		in := fixtureInput()
		in.Skill, in.SkillDescription = skill, ""
		msgs, err := Render(KindGame, in)
		require.NoError(t, err)
		assert.Contains(t, msgs[1].Content, SkillDescriptions["spatial reasoning"], "skill %q", skill)
	}
	for _, s := range []string{"logical_deduction", "causal_inference", "planning", "pattern_induction", "quantitative_reasoning"} {
		assert.NotEmpty(t, SkillDescription(s), s)
	}
	assert.Empty(t, SkillDescription("juggling"))
}
