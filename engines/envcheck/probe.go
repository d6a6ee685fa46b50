package envcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/internal/textcut"
)

// validActions extracts the actions an observation lists on its last
// "Valid actions:" line (the contract's convention: "a | b | c", commas
// accepted too). It returns nil when there is no such line.
func validActions(obs string) []string {
	// Compare byte windows case-insensitively: lower-casing the whole text
	// first would shift byte offsets for some non-ASCII runes.
	const marker = "valid actions:"
	idx := -1
	for i := len(obs) - len(marker); i >= 0; i-- {
		if strings.EqualFold(obs[i:i+len(marker)], marker) {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil
	}
	line := obs[idx+len(marker):]
	if nl := strings.IndexByte(line, '\n'); nl >= 0 {
		line = line[:nl]
	}
	sep := "|"
	if !strings.Contains(line, "|") {
		sep = ","
	}
	var out []string
	for _, part := range strings.Split(line, sep) {
		a := strings.Trim(strings.TrimSpace(part), "`'\"")
		if a != "" && len(a) <= 200 {
			out = append(out, a)
		}
	}
	return out
}

// fallbackActions are tried when an observation lists no valid actions.
var fallbackActions = []string{"1", "a", "yes", "up", "look", "0"}

// plausible picks the next probe action: for tool use a schema-valid call of
// a random tool, for games one of the listed valid actions.
func (v *validator) plausible(obs string, rng *rand.Rand) string {
	if v.meta.Kind == "tool_use" {
		calls := toolCalls(v.meta.Tools)
		if len(calls) > 0 {
			return calls[rng.IntN(len(calls))]
		}
	}
	acts := validActions(obs)
	if len(acts) == 0 {
		acts = fallbackActions
	}
	return acts[rng.IntN(len(acts))]
}

// toolSchema is the part of a tool declaration the probe reads.
type toolSchema struct {
	Name       string `json:"name"`
	Parameters struct {
		Properties map[string]struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		} `json:"properties"`
	} `json:"parameters"`
}

func parseTools(raw json.RawMessage) []toolSchema {
	var ts []toolSchema
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil
	}
	return ts
}

func toolNames(raw json.RawMessage) []string {
	var names []string
	for _, t := range parseTools(raw) {
		names = append(names, t.Name)
	}
	return names
}

// toolCalls builds one schema-valid call per tool, with placeholder values
// of the declared types (first enum value when there is one). Keys are sorted
// so the calls are the same on every run.
func toolCalls(raw json.RawMessage) []string {
	var out []string
	for _, t := range parseTools(raw) {
		args := map[string]any{}
		for k, p := range t.Parameters.Properties {
			if len(p.Enum) > 0 {
				args[k] = p.Enum[0]
				continue
			}
			typ, _ := p.Type.(string)
			if l, ok := p.Type.([]any); ok && len(l) > 0 {
				typ, _ = l[0].(string)
			}
			switch typ {
			case "string":
				args[k] = "test"
			case "integer", "number":
				args[k] = 1
			case "boolean":
				args[k] = true
			case "array":
				args[k] = []any{}
			case "object":
				args[k] = map[string]any{}
			default:
				args[k] = nil
			}
		}
		b, err := json.Marshal(map[string]any{"name": t.Name, "arguments": args}) // map keys marshal sorted
		if err == nil {
			out = append(out, string(b))
		}
	}
	sort.Strings(out)
	return out
}

// toolChecks runs the tool-use reset gate and impossibility screening
// (docs/method.md step 4) on every seed.
func (v *validator) toolChecks(ctx context.Context, seeds []int64) {
	c := v.c
	t0 := time.Now()
	var solutions int
	for _, seed := range seeds {
		ep, err := v.prog.Reset(ctx, seed)
		if err != nil {
			c.fail(CheckResetGate, fmt.Sprintf("seed %d: reset: %s", seed, errDetail(err)), err)
			return
		}
		st, err := ep.ToolStatus(ctx)
		ep.Close()
		if err != nil {
			c.fail(CheckResetGate, fmt.Sprintf("seed %d: tool status: %s", seed, errDetail(err)), err)
			return
		}
		if len(st.Criteria) == 0 {
			c.fail(CheckResetGate, fmt.Sprintf("seed %d: instructions() returned no criteria", seed), nil)
			return
		}
		for i, holds := range st.Criteria {
			if holds {
				text := "" // Episode.ToolStatus checks the lists' lengths; do not rely on it here
				if i < len(st.Instructions) {
					text = st.Instructions[i]
				}
				c.fail(CheckResetGate, fmt.Sprintf("seed %d: instruction %d (%s) is already satisfied right after reset", seed, i+1, clip(text, 80)), nil)
				return
			}
		}
		if n := len(st.Instructions); n < 3 || n > 5 {
			c.fail(CheckImpossibility, fmt.Sprintf("seed %d: %d instructions; 3-5 are required", seed, n), nil)
			return
		}
		if len(st.Problems) > 0 {
			c.fail(CheckImpossibility, fmt.Sprintf("seed %d: %s", seed, textcut.Prefix(strings.Join(st.Problems, "; "), 2000)), nil)
			return
		}
		for i, keys := range st.MissingKeys {
			if len(keys) > 0 {
				c.fail(CheckImpossibility, fmt.Sprintf("seed %d: criterion %d reads state %s that initial_state does not define", seed, i+1, textcut.Prefix(strings.Join(keys, ", "), 2000)), nil)
				return
			}
		}
		for i, e := range st.CriterionErrors {
			if e != "" {
				c.fail(CheckImpossibility, fmt.Sprintf("seed %d: criterion %d raises on the initial state: %s", seed, i+1, textcut.Prefix(e, 2000)), nil)
				return
			}
		}
		if st.Solution != nil {
			solutions++
			if d := v.replaySolution(ctx, seed, st.Solution); d != "" {
				c.fail(CheckImpossibility, d, nil)
				return
			}
		}
	}
	c.time(CheckResetGate, time.Since(t0))
	c.pass(CheckResetGate, fmt.Sprintf("no criterion holds after reset on seeds %v", seeds))
	if solutions > 0 {
		c.pass(CheckImpossibility, fmt.Sprintf("tools and state keys exist; reference solution completes every instruction on %d seeds", solutions))
	} else {
		c.pass(CheckImpossibility, "tools and state keys exist (no reference solution declared, so reachability is not proven)")
	}
}

// replaySolution plays the env's own reference solution; it must complete
// every instruction (total reward 1, success true).
func (v *validator) replaySolution(ctx context.Context, seed int64, actions []string) string {
	ep, err := v.prog.Reset(ctx, seed)
	if err != nil {
		return fmt.Sprintf("seed %d: reset for the reference solution: %s", seed, errDetail(err))
	}
	defer ep.Close()
	total := 0.0
	for i, a := range actions {
		res, err := ep.Step(ctx, a)
		if err != nil {
			return fmt.Sprintf("seed %d: reference solution step %d: %s", seed, i+1, errDetail(err))
		}
		total += res.Reward
		if res.Terminated || res.Truncated {
			if infoSuccess(res.Info) && math.Abs(total-1) < 1e-6 {
				return ""
			}
			return fmt.Sprintf("seed %d: reference solution ended at step %d without completing every instruction (return %g)", seed, i+1, total)
		}
	}
	return fmt.Sprintf("seed %d: reference solution (%d actions) does not complete every instruction (return %g)", seed, len(actions), total)
}

// infoSuccess reports whether info carries "success": true.
func infoSuccess(info json.RawMessage) bool {
	var m struct {
		Success *bool `json:"success"`
	}
	return json.Unmarshal(info, &m) == nil && m.Success != nil && *m.Success
}
