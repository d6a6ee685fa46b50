package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToolStatus(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, `
from spade_env import ToolUseEnv
class Shop(ToolUseEnv):
    tools = [
        {"name": "buy", "description": "Buy an item.", "parameters": {"type": "object",
         "properties": {"item": {"type": "string"}}, "required": ["item"]}},
        {"name": "ghost", "description": "No method.", "parameters": {"type": "object", "properties": {}}},
    ]
    def initial_state(self):
        return {"cart": []}
    def instructions(self):
        return [("Buy an apple.", lambda s: "apple" in s["cart"]),
                ("Pay.", lambda s: s.get("paid", False)),
                ("Leave.", lambda s: s["left"])]
    def tool_buy(self, item):
        self.state["cart"].append(item)
        return "bought " + item
    def solution(self):
        return ['{"name": "buy", "arguments": {"item": "apple"}}']
`)
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, "tool_use", p.Meta().Kind)
	e, err := p.Reset(ctx, 1)
	require.NoError(t, err)
	assert.Contains(t, e.Observation, "Instruction 1 of 3: Buy an apple.")
	st, err := e.ToolStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, false}, st.Criteria)
	assert.Equal(t, [][]string{{}, {"paid"}, {"left"}}, st.MissingKeys)
	assert.Contains(t, st.CriterionErrors[2], "KeyError")
	assert.Equal(t, []string{"buy", "ghost"}, st.Tools)
	assert.Contains(t, strings.Join(st.Problems, ";"), "tool ghost: no method tool_ghost")
	assert.Equal(t, []string{`{"name": "buy", "arguments": {"item": "apple"}}`}, st.Solution)
	r, err := e.Step(ctx, st.Solution[0])
	require.NoError(t, err)
	assert.InDelta(t, 1.0/3, r.Reward, 1e-12)
	st, err = e.ToolStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, false}, st.Criteria)
	require.NoError(t, e.Close())
}

// TestToolStatusSignatures: a tool method that cannot take its schema's
// arguments as keywords is a problem, with inspect's reason; methods that
// can, decorated ones and **kwargs included, are not.
func TestToolStatusSignatures(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, `
import functools
from spade_env import ToolUseEnv

def logged(f):
    @functools.wraps(f)
    def inner(*args, **kwargs):
        return f(*args, **kwargs)
    return inner

def tool(name, props, required):
    return {"name": name, "description": "A tool.", "parameters": {"type": "object",
            "properties": {p: {"type": "string"} for p in props}, "required": required}}

class Desk(ToolUseEnv):
    tools = [tool("plain", ["a", "b"], ["a"]), tool("extra", ["a", "z"], ["a"]), tool("needs", ["a"], []),
             tool("wrapped", ["a"], ["a"]), tool("wrapped_bad", ["q"], ["q"]), tool("kw", ["a", "q"], [])]
    def initial_state(self):
        return {}
    def instructions(self):
        return [("Do.", lambda s: False)]
    def tool_plain(self, a, b="x"):
        return ""
    def tool_extra(self, a):
        return ""
    def tool_needs(self, a, b):
        return ""
    @logged
    def tool_wrapped(self, a):
        return ""
    @logged
    def tool_wrapped_bad(self, a):
        return ""
    def tool_kw(self, **kwargs):
        return ""
`)
	require.NoError(t, err)
	defer p.Close()
	e, err := p.Reset(ctx, 1)
	require.NoError(t, err)
	defer e.Close()
	st, err := e.ToolStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"tool extra: tool_extra does not accept the schema's arguments (got an unexpected keyword argument 'z')",
		"tool needs: tool_needs does not accept the schema's arguments (missing a required argument: 'b')",
		"tool wrapped_bad: tool_wrapped_bad does not accept the schema's arguments (missing a required argument: 'a')",
	}, st.Problems)
}
