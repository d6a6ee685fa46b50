package validate

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/engines/sandbox"
)

// TestEnvironmentRowTools checks the invariant the rollout stage relies on
// when it plays pool environments: tools is non-empty exactly when
// env_kind is "tool_use".
func TestEnvironmentRowTools(t *testing.T) {
	c := Candidate{EnvID: "e1", SlotID: "s1", Skill: "planning", Setting: "tool_use", Kind: "tooluse", DocIDs: []string{"d1"}, Source: "class E: pass"}
	for _, tc := range []struct {
		name string
		rep  envcheck.Report
		kind string
		want string
	}{
		{"game", envcheck.Report{Valid: true, Kind: "game", Meta: &sandbox.Meta{Kind: "game", MaxTurns: 5}}, "game", ""},
		{"tool use", envcheck.Report{Valid: true, Kind: "tool_use", Meta: &sandbox.Meta{Kind: "tool_use", MaxTurns: 5, Tools: json.RawMessage(`[ {"name": "buy"} ]`)}}, "tool_use", `[{"name":"buy"}]`},
		{"tool use, tools = None", envcheck.Report{Valid: true, Kind: "tool_use", Meta: &sandbox.Meta{Kind: "tool_use", MaxTurns: 5}}, "tool_use", "null"},
		{"no class", envcheck.Report{Reason: envcheck.CheckClass}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := environmentRow(c, tc.rep)
			require.Equal(t, tc.kind, e.EnvKind)
			require.Equal(t, tc.want, e.Tools)
			require.Equal(t, e.EnvKind == "tool_use", e.Tools != "")
			require.Equal(t, []string{"d1"}, e.DocIDs)
		})
	}
}
