package procedural

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/spade-pipeline/spade/engines/model"
)

// The tool-use agent follows the current instruction of a ToolUseEnv play
// ("Instruction k of n: ..."): it picks the tool whose name and description
// best match the instruction, fills the arguments from the instruction text
// (identifiers after "from"/"to", numbers, quoted strings, enum words),
// falls back to earlier tool results and the hint for identifiers the
// instruction does not name, and calls a lookup tool (get_/list_) first when
// it still lacks one. Its seeded slips (swapped identifiers, a wrong enum
// value, skipped lookups at depth 1) are what a hint can prevent.

var (
	instructionRE = regexp.MustCompile(`Instruction (\d+) of (\d+): ([^\n]*)`)
	idRE          = regexp.MustCompile(`\b[A-Z]{2,}-?\d+\b`)
	capWordRE     = regexp.MustCompile(`\b[A-Z][a-z][A-Za-z0-9]{2,}\b`)
	wordsRE       = regexp.MustCompile(`[A-Za-z]+`)
	lookupPrefix  = []string{"get_", "list_", "find_", "search_", "lookup_"}
)

type schemaProp struct {
	Type        any      `json:"type"`
	Enum        []any    `json:"enum"`
	Description string   `json:"description"`
	name        string   // property name
	words       []string // name split on underscores
}

type toolSpec struct {
	tool     model.Tool
	props    []schemaProp // required properties, in the schema's required order
	lookup   bool
	nameWord []string
}

func parseTools(tools []model.Tool) []toolSpec {
	var out []toolSpec
	for _, t := range tools {
		var schema struct {
			Properties map[string]schemaProp `json:"properties"`
			Required   []string              `json:"required"`
		}
		_ = json.Unmarshal([]byte(t.Parameters), &schema) // a bad schema just means no arguments
		ts := toolSpec{tool: t, nameWord: strings.Split(strings.ToLower(t.Name), "_")}
		for _, r := range schema.Required {
			p, ok := schema.Properties[r]
			if !ok {
				continue
			}
			p.name = r
			p.words = strings.Split(strings.ToLower(r), "_")
			ts.props = append(ts.props, p)
		}
		for _, pre := range lookupPrefix {
			if strings.HasPrefix(strings.ToLower(t.Name), pre) {
				ts.lookup = true
			}
		}
		out = append(out, ts)
	}
	return out
}

func typeName(t any) string {
	switch v := t.(type) {
	case string:
		return v
	case []any:
		if len(v) > 0 {
			s, _ := v[0].(string)
			return s
		}
	}
	return "string"
}

// stemMatch treats words as equal when one is a prefix (>= 4 letters) of
// the other: ship/shipping, invoice/invoices.
func stemMatch(a, b string) bool {
	if a == b {
		return true
	}
	if len(a) >= 4 && len(b) >= 4 {
		return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
	}
	return false
}

func lowerWordsOf(s string) []string {
	var out []string
	for _, w := range wordsRE.FindAllString(s, -1) {
		if len(w) >= 3 {
			out = append(out, strings.ToLower(w))
		}
	}
	return out
}

type toolTurn struct {
	instr      string   // current instruction text
	results    []string // observations since the instruction appeared
	calls      []string // tool calls made since then (name + canonical args)
	hintText   string   // hint sentences relevant to the instruction
	usedLookup map[string]bool
}

// readToolTurn reads the current instruction of a tool-use play from msgs
// (the last one stated) with the tool results and calls since, and the
// sentences of hint that name its terms; false when every instruction is
// complete or none was stated (the play is done). Split out of toolAct.
func readToolTurn(msgs []model.Message, hint string) (toolTurn, bool) {
	tt := toolTurn{usedLookup: map[string]bool{}}
	instrAt := -1
	for i, m := range msgs {
		if m.Role != model.RoleUser && m.Role != model.RoleTool {
			continue
		}
		if strings.Contains(m.Content, "All instructions are complete") {
			return toolTurn{}, false
		}
		if ms := instructionRE.FindAllStringSubmatch(m.Content, -1); ms != nil {
			tt.instr = ms[len(ms)-1][3]
			instrAt = i
		}
	}
	if instrAt < 0 {
		return toolTurn{}, false
	}
	for i := instrAt; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case model.RoleUser, model.RoleTool:
			if i > instrAt {
				tt.results = append(tt.results, m.Content)
			}
		case model.RoleAssistant:
			for _, tc := range m.ToolCalls {
				tt.calls = append(tt.calls, tc.Name+" "+canonicalArgs(tc.Arguments))
				tt.usedLookup[tc.Name+" "+canonicalArgs(tc.Arguments)] = true
			}
		}
	}
	// Results of lookups made for the previous instruction are still useful.
	if instrAt >= 0 && msgs[instrAt].Role == model.RoleTool {
		tt.results = append([]string{msgs[instrAt].Content}, tt.results...)
	}
	instrTerms := append(idRE.FindAllString(tt.instr, -1), capWordRE.FindAllString(tt.instr, -1)...)
	for _, sent := range strings.Split(hint, ";") {
		for _, t := range instrTerms {
			if strings.Contains(sent, t) {
				tt.hintText += " " + sent
				break
			}
		}
	}
	return tt, true
}

// toolOption is one tool toolAct could call, with the arguments it filled
// (ok: all of them) and how well its name and description match the
// instruction; package-level so pickTool can take it.
type toolOption struct {
	spec  toolSpec
	args  map[string]any
	ok    bool
	score float64
}

// pickTool returns the index in opts of the tool toolAct calls, or -1
// (done); split out of toolAct.
func pickTool(opts []toolOption, tt toolTurn) int {
	// The best-matching tool whose arguments can all be filled and that was
	// not already tried identically for this instruction.
	best := -1
	for i, o := range opts {
		if !o.ok || tt.usedLookup[o.spec.tool.Name+" "+canonicalJSON(o.args)] {
			continue
		}
		if best < 0 || o.score > opts[best].score {
			best = i
		}
	}
	top := 0
	for i, o := range opts {
		if o.score > opts[top].score {
			top = i
		}
	}
	// A needed value is missing: look it up first (a lookup tool that fits).
	if !opts[top].ok && !opts[top].spec.lookup {
		lk := -1
		for i, o := range opts {
			if o.spec.lookup && o.ok && !tt.usedLookup[o.spec.tool.Name+" "+canonicalJSON(o.args)] {
				if lk < 0 || o.score > opts[lk].score {
					lk = i
				}
			}
		}
		if lk >= 0 {
			best = lk
		}
	}
	return best
}

// toolAct chooses the next tool call (or "done") of a tool-use play.
func toolAct(msgs []model.Message, tools []model.Tool, hint string, seed int64, choice int) model.Choice {
	p := newPersona(seed, choice)
	turn := 0
	for _, m := range msgs {
		if m.Role == model.RoleAssistant {
			turn++
		}
	}
	rng := turnRand(seed, choice, turn)
	tt, ok := readToolTurn(msgs, hint)
	if !ok {
		return textChoice("done")
	}
	if p.depth <= 1 {
		tt.results = nil // shallow reasoning: does not read earlier tool results
	}
	specs := parseTools(tools)
	if len(specs) == 0 {
		return textChoice("done")
	}
	iw := lowerWordsOf(tt.instr)
	var opts []toolOption
	for _, s := range specs {
		sc := 0.0
		for _, w := range iw {
			for _, nw := range s.nameWord {
				if stemMatch(w, nw) {
					sc += 2
				}
			}
			for _, dw := range lowerWordsOf(s.tool.Description) {
				if stemMatch(w, dw) {
					sc += 0.5
				}
			}
		}
		if s.lookup {
			sc -= 1.5
		}
		slip := rng.Float64() < p.eps*2.5
		args, ok := fillArgs(s, tt, p, slip, nil)
		if ok && s.lookup && tt.usedLookup[s.tool.Name+" "+canonicalJSON(args)] {
			// Already looked that up: try the instruction's other identifiers.
			ex := map[string]bool{}
			for _, v := range args {
				if str, isStr := v.(string); isStr {
					ex[str] = true
				}
			}
			if a2, ok2 := fillArgs(s, tt, p, false, ex); ok2 {
				args = a2
			}
		}
		opts = append(opts, toolOption{spec: s, args: args, ok: ok, score: sc})
	}
	best := pickTool(opts, tt)
	if best < 0 {
		return textChoice("done")
	}
	o := opts[best]
	args, _ := json.Marshal(o.args)
	return model.Choice{
		Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{
			ID: fmt.Sprintf("call_%d_%d", turn, choice), Name: o.spec.tool.Name, Arguments: string(args),
		}}},
		FinishReason: "tool_calls",
	}
}

func canonicalArgs(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	return canonicalJSON(v)
}

func canonicalJSON(v any) string {
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	return string(b)
}

// fillArgs fills a tool's required arguments; ok is false when one cannot
// be filled. slip makes the seeded mistake of the persona: the first two
// identifiers swap places unless the hint confirms them.
func fillArgs(s toolSpec, tt toolTurn, p persona, slip bool, exclude map[string]bool) (map[string]any, bool) {
	args := map[string]any{}
	used := map[string]bool{}
	for k := range exclude {
		used[k] = true
	}
	text := tt.instr
	quoted := quoteRE.FindAllStringSubmatch(text, -1)
	plain := quoteRE.ReplaceAllString(text, " ")
	ids := idRE.FindAllStringIndex(plain, -1)
	for _, prop := range s.props {
		switch {
		case len(prop.Enum) > 0:
			v, ok := enumIn(prop.Enum, text)
			if !ok {
				for _, r := range tt.results {
					if v, ok = enumIn(prop.Enum, r); ok {
						break
					}
				}
			}
			if !ok {
				return nil, false
			}
			args[prop.name] = v
		case typeName(prop.Type) == "integer" || typeName(prop.Type) == "number":
			nums := intRE.FindAllString(idRE.ReplaceAllString(plain, " "), -1)
			found := false
			for _, n := range nums {
				if !used["#"+n] {
					used["#"+n] = true
					args[prop.name] = atoi(n)
					found = true
					break
				}
			}
			if !found {
				return nil, false
			}
		default:
			v, ok := pickID(prop, plain, ids, used, p)
			if !ok {
				v, ok = idFromContext(prop, tt, used)
			}
			if !ok && len(quoted) > 0 {
				for _, q := range quoted {
					if t := q[1] + q[2]; !used[t] {
						v, ok = t, true
						break
					}
				}
			}
			if !ok {
				return nil, false
			}
			used[v] = true
			args[prop.name] = v
		}
	}
	if slip {
		// A slip on a choice: the neighbouring enum value, unless the hint
		// confirms the right one.
		for _, prop := range s.props {
			if v, ok := args[prop.name].(string); ok && len(prop.Enum) > 1 && !strings.Contains(tt.hintText, v) {
				for i, e := range prop.Enum {
					if e == v {
						if alt, ok := prop.Enum[(i+1)%len(prop.Enum)].(string); ok {
							args[prop.name] = alt
						}
						return args, true
					}
				}
			}
		}
		var keys []string
		for _, prop := range s.props {
			if v, ok := args[prop.name].(string); ok && idRE.MatchString(v) && !strings.Contains(tt.hintText, v) {
				keys = append(keys, prop.name)
			}
		}
		if len(keys) >= 2 {
			args[keys[0]], args[keys[1]] = args[keys[1]], args[keys[0]]
		}
	}
	return args, true
}

func enumIn(enum []any, text string) (string, bool) {
	low := " " + strings.ToLower(text) + " "
	for _, e := range enum {
		s, ok := e.(string)
		if !ok {
			continue
		}
		for _, form := range []string{s, strings.ReplaceAll(s, "_", " "), strings.ReplaceAll(s, "_", "'")} {
			if containsPhrase(low, form) || strings.Contains(low, " "+strings.ToLower(form)+".") {
				return s, true
			}
		}
	}
	return "", false
}

// pickID chooses the identifier of the instruction text that fits a
// property: the word just before it names the property ("from SAV-1",
// "account CHK-2"), or its letters abbreviate it (INV ~ invoice). Depth 1
// personas take identifiers in order of appearance.
func pickID(prop schemaProp, text string, ids [][]int, used map[string]bool, p persona) (string, bool) {
	best, bestScore := "", -1.0
	for _, loc := range ids {
		id := text[loc[0]:loc[1]]
		if used[id] {
			continue
		}
		sc := 0.0
		if p.depth >= 2 {
			before := precedingWord(text[:loc[0]])
			for _, w := range prop.words {
				if before == w {
					sc += 3
				}
			}
			prefix := strings.ToLower(strings.TrimRight(id, "-0123456789"))
			for _, w := range prop.words {
				if abbreviates(prefix, w) {
					sc += 2
				}
			}
		}
		if p.depth >= 2 && sc <= 0 {
			continue // nothing ties this identifier to the property
		}
		if sc > bestScore {
			best, bestScore = id, sc
		}
	}
	return best, best != ""
}

// idFromContext finds an identifier for prop in earlier tool results or the
// hint: on a line that mentions one of the instruction's capitalised terms
// (or the property's own words, e.g. "coupon").
func idFromContext(prop schemaProp, tt toolTurn, used map[string]bool) (string, bool) {
	terms := capWordRE.FindAllString(tt.instr, -1)
	var keys []string
	for _, t := range terms {
		if !strings.EqualFold(t, "Instruction") {
			keys = append(keys, t)
		}
	}
	keys = append(keys, prop.words...)
	keys = append(keys, lowerWordsOf(prop.Description)...)
	freeID := !strings.HasSuffix(prop.name, "_id") && !strings.Contains(prop.name, "account")
	sources := append([]string{tt.hintText}, tt.results...)
	for _, src := range sources {
		for _, line := range strings.Split(src, "\n") {
			hit := false
			for _, k := range keys {
				if len(k) >= 4 && strings.Contains(strings.ToLower(line), strings.ToLower(k)) {
					hit = true
				}
			}
			if !hit {
				continue
			}
			for _, id := range idRE.FindAllString(line, -1) {
				prefix := strings.ToLower(strings.TrimRight(id, "-0123456789"))
				fits := false
				for _, w := range prop.words {
					if abbreviates(prefix, w) {
						fits = true
					}
				}
				if freeID { // a code or reference, not a typed id: any identifier fits
					fits = true
				}
				if fits && !used[id] && !strings.Contains(tt.instr, id) {
					return id, true
				}
			}
		}
	}
	return "", false
}

// precedingWord is the lower-case word right before the end of s.
func precedingWord(s string) string {
	s = strings.TrimRight(s, " \t,:")
	i := len(s)
	for i > 0 && (s[i-1] >= 'a' && s[i-1] <= 'z' || s[i-1] >= 'A' && s[i-1] <= 'Z') {
		i--
	}
	return strings.ToLower(s[i:])
}

// abbreviates reports whether an identifier prefix abbreviates a word: same
// first letter and its letters in order (INV ~ invoice, TCK ~ ticket).
func abbreviates(prefix, word string) bool {
	if len(prefix) < 2 || len(word) < 2 || prefix[0] != word[0] {
		return false
	}
	j := 0
	for i := 0; i < len(word) && j < len(prefix); i++ {
		if word[i] == prefix[j] {
			j++
		}
	}
	return j == len(prefix)
}
