package envcheck

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidActions(t *testing.T) {
	cases := []struct {
		name, obs string
		want      []string
	}{
		{"pipes", "Board...\nValid actions: up | down | left", []string{"up", "down", "left"}},
		{"commas", "Valid actions: a, b, c\nmore text", []string{"a", "b", "c"}},
		{"last line wins", "Valid actions: x\n...\nvalid actions: `y` | 'z'", []string{"y", "z"}},
		{"none", "no list here", nil},
		{"empty list", "Valid actions:   ", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, validActions(tc.obs))
		})
	}
}

func TestToolCallsAreSchemaValidAndSorted(t *testing.T) {
	tools := json.RawMessage(`[
	 {"name":"pay","parameters":{"type":"object","properties":{"amount":{"type":"number"},"to":{"type":"string","enum":["bob","amy"]},"note":{"type":["string","null"]}}}},
	 {"name":"audit","parameters":{"type":"object","properties":{"flags":{"type":"array"},"deep":{"type":"boolean"},"opts":{"type":"object"},"n":{"type":"integer"}}}}]`)
	got := toolCalls(tools)
	assert.Equal(t, []string{
		`{"arguments":{"amount":1,"note":"test","to":"bob"},"name":"pay"}`,
		`{"arguments":{"deep":true,"flags":[],"n":1,"opts":{}},"name":"audit"}`,
	}, got)
	assert.Nil(t, toolCalls(json.RawMessage(`{"not":"a list"}`)))
	assert.Equal(t, []string{"pay", "audit"}, toolNames(tools))
}

func TestSuccessProblem(t *testing.T) {
	assert.Empty(t, successProblem(json.RawMessage(`{"success":true}`)))
	assert.Empty(t, successProblem(json.RawMessage(`{}`)))
	assert.Contains(t, successProblem(json.RawMessage(`{"success":"yes"}`)), "must be a bool")
	assert.Contains(t, successProblem(json.RawMessage(`[1]`)), "not a JSON object")
	// JSON null unmarshals into a Go map without error: still not a dict.
	assert.Contains(t, successProblem(json.RawMessage(`null`)), "not a JSON object")
	assert.Contains(t, successProblem(nil), "not a JSON object")
}

func TestIsObject(t *testing.T) {
	assert.True(t, isObject(json.RawMessage(`{}`)))
	assert.True(t, isObject(json.RawMessage(`{"a":1}`)))
	for _, bad := range []string{`null`, `[]`, `"x"`, `1`, ``} {
		assert.False(t, isObject(json.RawMessage(bad)), bad)
	}
}

// TestRewardInRange: the rounding tolerance scales with the range, so a reward
// a thousand times the top of a narrow range is out, and a range as wide
// as float64 allows still has a finite tolerance.
func TestRewardInRange(t *testing.T) {
	assert.True(t, RewardInRange(1, 0, 1))
	assert.True(t, RewardInRange(0.1+0.2, 0, 0.3), "rounding above the top")
	assert.True(t, RewardInRange(1+1e-12, 0, 1))
	assert.False(t, RewardInRange(1+1e-6, 0, 1))
	assert.False(t, RewardInRange(-1e-6, 0, 1))
	assert.True(t, RewardInRange(1e-12, 0, 1e-12))
	assert.False(t, RewardInRange(1e-9, 0, 1e-12))
	assert.True(t, RewardInRange(1e308, -math.MaxFloat64, math.MaxFloat64))
	assert.False(t, RewardInRange(math.Inf(1), -math.MaxFloat64, math.MaxFloat64))
	assert.False(t, RewardInRange(math.NaN(), 0, 1))
}

// FuzzValidActions: observations are untrusted environment output.
func FuzzValidActions(f *testing.F) {
	for _, s := range []string{"Valid actions: a | b", "valid actions:", "x\nValid actions: ,,,|", "Valid actions: " + strings.Repeat("a|", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, obs string) {
		for _, a := range validActions(obs) {
			if a == "" || len(a) > 200 || strings.Contains(a, "\n") {
				t.Fatalf("bad action %q", a)
			}
		}
	})
}

// FuzzToolCalls: the tools list comes from untrusted class attributes.
func FuzzToolCalls(f *testing.F) {
	f.Add(`[{"name":"x","parameters":{"properties":{"a":{"type":"string"}}}}]`)
	f.Add(`[{"name":"x","parameters":{"properties":{"a":{"type":[1,2]}}}}]`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		for _, c := range toolCalls(json.RawMessage(raw)) {
			if !json.Valid([]byte(c)) {
				t.Fatalf("invalid call JSON %q", c)
			}
		}
	})
}
