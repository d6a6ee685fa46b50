package procedural

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"text/template"
	"unicode"
)

//go:embed templates/*.py.tmpl
var templateFS embed.FS

var templates = template.Must(template.ParseFS(templateFS, "templates/*.py.tmpl"))

// ErrBadRequest marks a request whose Meta does not describe a task this
// backend can do (unknown spade.task, skill or kind, malformed JSON in
// spade.doc or spade.memory). Callers record it on the call's row.
var ErrBadRequest = errors.New("procedural: bad request")

// MemoryEntry is one environment-memory entry as the design stage passes it
// in "spade.memory" (docs/method.md step 7). WinRate is the share of unhinted
// plays won (0..1); Difficulty is the family's level 1..5 ("" family and 0
// difficulty for environments this backend did not design).
type MemoryEntry struct {
	// EnvID is the remembered environment (memory.env_id).
	EnvID string `json:"env_id"`
	// Family is the environment's family; entries of the family being
	// designed steer its difficulty.
	Family string `json:"family"`
	// Skill is the entry's skill (the slot's skill, as the design stage
	// passes only those).
	Skill string `json:"skill"`
	// Difficulty is the family level, 1..5 (0 when unknown; such entries
	// are ignored).
	Difficulty int `json:"difficulty"`
	// WinRate is the share of unhinted plays won (0..1): above BandHigh the
	// next design is one level harder, below BandLow one level easier.
	WinRate float64 `json:"win_rate"`
	// Regret is the entry's regret; this backend does not read it (it is
	// part of the request hash).
	Regret float64 `json:"regret"`
}

// Learnable band of unhinted win rate (docs/method.md step 6): the designer steps
// a family's difficulty up above it and down below it.
const (
	BandLow  = 0.2
	BandHigh = 0.8
	// DefaultDifficulty is used for a family with no memory entry.
	DefaultDifficulty = 3
	// MaxDifficulty is the hardest level of every family (levels are 1..5).
	MaxDifficulty = 5
)

// designSpec is everything a design depends on, decoded from Meta.
type designSpec struct {
	kind, skill, setting, slot string
	attempt                    int
	docs                       []Document
	memory                     []MemoryEntry
	feedback                   string
	seed                       int64
}

func parseDesignSpec(meta map[string]string, seed int64) (designSpec, error) {
	s := designSpec{
		kind: meta[MetaKind], skill: meta[MetaSkill], setting: meta[MetaSetting],
		slot: meta[MetaSlot], feedback: meta[MetaFeedback], seed: seed,
	}
	if !validSkill(s.skill) {
		return s, fmt.Errorf("%w: Meta %s=%q is not one of %s", ErrBadRequest, MetaSkill, s.skill, strings.Join(Skills, ", "))
	}
	switch s.kind {
	case "reasoning", "game", "grounded", "tooluse", "":
	default:
		return s, fmt.Errorf("%w: Meta %s=%q is not reasoning, game, grounded or tooluse", ErrBadRequest, MetaKind, s.kind)
	}
	if a := meta[MetaAttempt]; a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 {
			return s, fmt.Errorf("%w: Meta %s=%q is not a non-negative integer", ErrBadRequest, MetaAttempt, a)
		}
		s.attempt = n
	}
	if d := strings.TrimSpace(meta[MetaDoc]); d != "" {
		if err := json.Unmarshal([]byte(d), &s.docs); err != nil {
			return s, fmt.Errorf("%w: Meta %s: %w", ErrBadRequest, MetaDoc, err)
		}
	}
	if m := strings.TrimSpace(meta[MetaMemory]); m != "" {
		if err := json.Unmarshal([]byte(m), &s.memory); err != nil {
			return s, fmt.Errorf("%w: Meta %s: %w", ErrBadRequest, MetaMemory, err)
		}
	}
	return s, nil
}

func validSkill(s string) bool {
	for _, k := range Skills {
		if k == s {
			return true
		}
	}
	return false
}

func (s designSpec) toolUse() bool { return s.kind == "tooluse" || s.setting == "tool_use" }

// slotNumber is the trailing integer of a slot id ("r3-s07" -> 7), so
// consecutive slots cycle through a skill's families; ids without digits
// hash instead.
func slotNumber(slot string) int {
	end := len(slot)
	start := end
	for start > 0 && unicode.IsDigit(rune(slot[start-1])) {
		start--
	}
	if start < end && end-start < 9 {
		n, _ := strconv.Atoi(slot[start:end])
		return n
	}
	h := fnv.New32a()
	h.Write([]byte(slot))
	return int(h.Sum32() & 0x7fffffff)
}

// chooseDifficulty applies the learnable-band rule to the newest memory
// entry of the same family: above BandHigh one level harder, below BandLow
// one level easier, else the same level; no entry gives DefaultDifficulty.
func chooseDifficulty(fam string, memory []MemoryEntry) int {
	d := DefaultDifficulty
	for _, e := range memory { // the last matching entry is the newest
		if e.Family != fam || e.Difficulty < 1 {
			continue
		}
		d = e.Difficulty
		switch {
		case e.WinRate > BandHigh:
			d++
		case e.WinRate < BandLow:
			d--
		}
	}
	return clampDifficulty(d)
}

func clampDifficulty(d int) int { return max(1, min(MaxDifficulty, d)) }

// design is one rendered environment.
type design struct {
	family     string
	difficulty int
	source     string // Python source
	response   string // prose sentence + fenced source, as an LLM would answer
}

// designEnv renders the environment for spec; choice indexes the sample
// when Request.N > 1 (each sample takes the next family in the cycle).
func designEnv(spec designSpec, choice int) (design, error) {
	fams := familiesFor(spec.skill, spec.toolUse())
	if len(fams) == 0 {
		return design{}, fmt.Errorf("%w: no family for skill %q", ErrBadRequest, spec.skill)
	}
	idx := slotNumber(spec.slot) + choice
	if spec.attempt >= 2 { // a family that failed twice is swapped out
		idx += spec.attempt - 1
	}
	fam := fams[idx%len(fams)]
	diff := chooseDifficulty(fam.name, spec.memory)
	if spec.attempt > 0 && spec.feedback != "" {
		diff = clampDifficulty(diff - 1) // a simpler variant after a failure
	}
	for _, banTitleWords := range []bool{false, true} {
		d, err := renderFamily(spec, fam, diff, choice, banTitleWords)
		if err != nil {
			return design{}, err
		}
		if !mentionsTitle(d.source, spec.docs) {
			return d, nil
		}
	}
	return design{}, fmt.Errorf("render %s: document title still appears in the source", fam.name)
}

func mentionsTitle(src string, docs []Document) bool {
	low := strings.ToLower(src)
	for _, d := range docs {
		t := strings.ToLower(strings.TrimSpace(d.Title))
		if len(t) >= 3 && strings.Contains(low, t) {
			return true
		}
	}
	return false
}

func designSeed(spec designSpec, fam string, diff, choice int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%s|%d|%d|%d|%s|%s", fam, diff, spec.slot, spec.attempt, choice, spec.seed, spec.skill, spec.kind)
	for _, d := range spec.docs {
		fmt.Fprintf(h, "|%s|%d", d.DocID, len(d.Text))
	}
	return h.Sum64()
}

func renderFamily(spec designSpec, fam family, diff, choice int, banTitleWords bool) (design, error) {
	seed := designSeed(spec, fam.name, diff, choice)
	terms := extractTerms(spec.docs, 16, banTitleWords)
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x5eed5ade)), terms: terms, difficulty: diff}
	params := fam.params(g)
	maxTurns := pInt(params, "max_turns")
	if maxTurns < 1 || maxTurns > 15 {
		return design{}, fmt.Errorf("render %s: max_turns %d outside 1..15", fam.name, maxTurns)
	}
	marker, err := markerLiteral(fam.name, diff, params)
	if err != nil {
		return design{}, err
	}
	skill := fam.skill
	if fam.toolUse {
		skill = spec.skill
	}
	theme := terms.Names[0]
	data := map[string]any{
		"Class":      camel(fam.name) + camel(theme) + "Env",
		"EnvName":    pyString(fam.name + "_" + strings.ToLower(theme)),
		"Skill":      skill,
		"MaxTurns":   maxTurns,
		"Marker":     marker,
		"Family":     fam.name,
		"Difficulty": diff,
		"Story":      fam.story,
	}
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, fam.name+".py.tmpl", data); err != nil {
		return design{}, fmt.Errorf("render %s: %w", fam.name, err)
	}
	src := buf.String()
	domain := "the grounding"
	if len(spec.docs) > 0 && spec.docs[0].Domain != "" {
		domain = "the " + spec.docs[0].Domain
	}
	resp := fmt.Sprintf("Here is a %s environment built from %s material: %s.\n\n```python\n%s```\n",
		strings.ReplaceAll(skill, "_", " "), domain, fam.story, src)
	return design{family: fam.name, difficulty: diff, source: src, response: resp}, nil
}

// markerLiteral renders the SPADE_PROCEDURAL value: JSON that is also a
// valid Python literal because Params hold no booleans or nulls.
func markerLiteral(fam string, diff int, params Params) (string, error) {
	m := marker{Family: fam, Difficulty: diff, Version: markerVersion, Params: params}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", fmt.Errorf("encode %s parameters: %w", fam, err)
	}
	return strings.TrimSpace(buf.String()), nil
}

func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func camel(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(r))
			up = false
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
