package rollout

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/schemas"
)

// TestToolUseOneRule checks that an environment is played the same way on
// the regeneration round that validated it and on the pool rounds after,
// and that the way is its env_kind, not the slot's setting: a slot asked
// for tool use whose class is a game is played as a game on both.
func TestToolUseOneRule(t *testing.T) {
	for _, e := range []schemas.Environment{
		{EnvID: "game", Setting: "game", EnvKind: "game"},
		{EnvID: "game-asked-tool-use", Setting: "tool_use", EnvKind: "game"},
		{EnvID: "tool-use", Setting: "tool_use", EnvKind: "tool_use", Tools: `[{"name":"buy","description":"Buy.","parameters":{"type":"object"}}]`},
		{EnvID: "tool-use-in-game-slot", Setting: "game", EnvKind: "tool_use", Tools: `[{"name":"buy"}]`},
		{EnvID: "tool-use-tools-none", Setting: "tool_use", EnvKind: "tool_use", Tools: "null"},
	} {
		t.Run(e.EnvID, func(t *testing.T) {
			e.Valid = true
			// The pool stage copies these columns of the environments row.
			p := schemas.PoolEnv{EnvID: e.EnvID, Skill: e.Skill, Setting: e.Setting, Kind: e.Kind, Source: e.Source, MaxTurns: e.MaxTurns, Tools: e.Tools}
			want := e.EnvKind == "tool_use"
			require.Equal(t, want, envTarget(e, "").ToolUse, "regeneration round")
			require.Equal(t, want, poolTarget(p).ToolUse, "pool round")
		})
	}
}
