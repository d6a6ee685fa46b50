package config

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// Validate checks value ranges; errors wrap ErrInvalid and name the key.
// Every number must be finite; Load adds where each offending value was
// set (file and line, or variable).
func (c Config) Validate() error {
	probs := c.problems()
	if len(probs) == 0 {
		return nil
	}
	texts := make([]string, len(probs))
	for i, p := range probs {
		texts[i] = p.Text
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(texts, "; "))
}

// Problem is one failed check of a setting, as a section's Check returns
// it: the dotted keys it concerns and its text. Load appends where the
// first of Keys not left at its default was set ("(spade.yaml line 3)",
// "(SPADE_SAMPLE_SLOTS)"), so every key is a full dotted key of Keys.
type Problem struct {
	// Keys are the settings the problem concerns, the one to blame first.
	Keys []string
	// Text is the message, naming the setting and the value it got.
	Text string
}

// MaxCount bounds every count setting (slots, group size, turns,
// attempts, capacity, concurrency, ...): 2^20. Larger values exhaust
// memory long before they do anything useful.
const MaxCount = 1 << 20

// maxTimeoutS bounds every timeout (seconds): 10^7 s is about 115 days,
// far below where a time.Duration overflows.
const maxTimeoutS = 1e7

// minTimeoutS is the shortest timeout (seconds): 1 ms. Timeouts become a
// time.Duration in nanoseconds, and a value below 1 ns became 0, which
// the model client and the sandbox read as "use the default" (5 minutes,
// 5 s) and the trainer as "already expired".
const minTimeoutS = 1e-3

// problems runs every check of c: the root settings', each section's
// Check in the order of Config's fields, then the rules that read more
// than one section (crossProblems).
func (c Config) problems() []Problem {
	var p problems
	p.count("regenerate_every", c.RegenerateEvery)
	p.countOrZero("workers", c.Workers)
	for _, s := range []interface{ Check() []Problem }{
		c.Sample, c.Model, c.Sandbox, c.Design, c.Hint, c.Rollout, c.Label,
		c.Memory, c.GRPO, c.Observe, c.Metrics, c.Eval,
	} {
		p = append(p, s.Check()...)
	}
	return append(p, c.crossProblems()...)
}

// crossProblems checks the rules that read settings of more than one
// section: how a trainer pairs with each role's serving (model.serving
// against grpo.trainer and grpo.base_checkpoint), and that the eval
// stage has a served agent (eval.every against the agent's backend).
func (c Config) crossProblems() []Problem {
	var p problems
	m := c.Model
	for _, role := range RoleNames {
		rm, pre, ok := m.roleSettings(role)
		if !ok || rm.Backend != BackendOpenAI || m.Replay != "" {
			continue
		}
		if rm.Serving == "" && c.GRPO.Trainer != TrainerNone {
			p.addOnce(fmt.Sprintf("%s: grpo.trainer %s trains a policy that a fixed server never loads; set model.serving to managed or reload to serve each round's checkpoint, or to fixed to accept off-policy rounds (docs/serving.md)", pre, c.GRPO.Trainer), "model.serving", pre+".serving", "grpo.trainer")
		}
		if (rm.Serving == ServingManaged || rm.Serving == ServingReload) && strings.HasPrefix(c.GRPO.BaseCheckpoint, "tiny:") {
			p.addOnce(fmt.Sprintf("%s.serving %s serves checkpoints from files; grpo.base_checkpoint %q is the trainer's built-in tiny model, which no server loads: name a Hugging Face checkpoint directory", pre, rm.Serving, c.GRPO.BaseCheckpoint), "grpo.base_checkpoint", "model.serving")
		}
	}
	if e := c.Eval; e.Every > 0 {
		if a := c.Model.ForRole(RoleAgent); a.Backend != BackendOpenAI {
			p.add(fmt.Sprintf("eval.every is %d but the agent's backend is %s: evaluation scores a checkpoint served over the OpenAI API (model.backend openai, or model.roles.agent)", e.Every, a.Backend), "eval.every")
		}
	}
	return p
}

// problems collects the Problems of a check; its methods are the range
// rules the sections share, each with the message it has always had.
type problems []Problem

// add records a problem with text, concerning keys.
func (p *problems) add(text string, keys ...string) { *p = append(*p, Problem{keys, text}) }

// addOnce is add, unless a problem with the same text is recorded: the
// roles that take model.* as it is share its problems.
func (p *problems) addOnce(text string, keys ...string) {
	if !slices.ContainsFunc(*p, func(q Problem) bool { return q.Text == text }) {
		p.add(text, keys...)
	}
}

// count checks a count setting: > 0 and <= MaxCount.
func (p *problems) count(key string, v int) {
	if v <= 0 || v > MaxCount {
		p.add(fmt.Sprintf("%s must be > 0 and <= %d (got %d)", key, MaxCount, v), key)
	}
}

// countOrZero checks a count setting where 0 means none or a default:
// >= 0 and <= MaxCount.
func (p *problems) countOrZero(key string, v int) {
	if v < 0 || v > MaxCount {
		p.add(fmt.Sprintf("%s must be >= 0 and <= %d (got %d)", key, MaxCount, v), key)
	}
}

// finite reports every float64 setting of section (the struct at the
// dotted prefix) that is NaN or infinite. The range checks below skip
// such values (a NaN fails every comparison and is reported here).
func (p *problems) finite(prefix string, section any) {
	v := reflect.ValueOf(section)
	walk(v.Type(), prefix, func(key string, _ reflect.StructField) {
		f, _ := lookup(v, strings.TrimPrefix(key, prefix+"."))
		if f.Kind() == reflect.Float64 && !isFinite(f.Float()) {
			p.add(fmt.Sprintf("%s must be a finite number (got %v)", key, f.Float()), key)
		}
	})
}

// isFinite reports whether v is neither NaN nor infinite.
func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// atLeast checks a finite float setting: >= min, or > min when strict.
func (p *problems) atLeast(key string, v, min float64, strict bool) {
	if !isFinite(v) {
		return
	}
	if v < min || (strict && v == min) {
		op := ">="
		if strict {
			op = ">"
		}
		p.add(fmt.Sprintf("%s must be %s %g (got %g)", key, op, min, v), key)
	}
}

// timeout checks a finite timeout setting, in seconds: in [minTimeoutS,
// maxTimeoutS].
func (p *problems) timeout(key string, v float64) {
	if isFinite(v) && (v < minTimeoutS || v > maxTimeoutS) {
		p.add(fmt.Sprintf("%s must be >= %g and <= %g seconds (got %g)", key, minTimeoutS, float64(maxTimeoutS), v), key)
	}
}

// absPath checks an interpreter setting: an absolute path (the sandbox
// and the helpers start it from another working directory).
func (p *problems) absPath(key, path string) {
	if !filepath.IsAbs(path) {
		p.add(fmt.Sprintf("%s must be an absolute path (got %q)", key, path), key)
	}
}

// oneOf checks an enum setting against values: "KEY must be A, B or C
// (got "X")".
func (p *problems) oneOf(key, v string, values []string) {
	if !slices.Contains(values, v) {
		p.add(fmt.Sprintf("%s must be %s (got %q)", key, orList(values), v), key)
	}
}

// orList writes values as "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// list checks a list setting of names: each one of valid, none listed
// twice, and, unless empty is allowed, at least one.
func (p *problems) list(key string, got, valid []string, empty bool) {
	if len(got) == 0 && !empty {
		p.add(fmt.Sprintf("%s is empty: want one or more of %s", key, strings.Join(valid, ", ")), key)
	}
	seen := map[string]bool{}
	for i, v := range got {
		switch {
		case !slices.Contains(valid, v):
			p.add(fmt.Sprintf("%s[%d] %q: want one of %s", key, i, v, strings.Join(valid, ", ")), key)
		case seen[v]:
			p.add(fmt.Sprintf("%s[%d] %q is listed twice", key, i, v), key)
		}
		seen[v] = true
	}
}

// maxListedProblems bounds the problems of a file listed in one error;
// the rest are counted.
const maxListedProblems = 20
