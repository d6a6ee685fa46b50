// Package prompt holds the Environment Designer's prompt templates (SPADE
// sec. 4-5, app. C: one template per generation kind, plus the hint call
// and the agent's system prompt), renders them into chat messages, and
// extracts the Python source from a designer's answer (extract.go).
//
// Templates are Go text/template files embedded from templates/; edit
// them there and refresh the golden files with
// `go test ./engines/prompt -update`.
package prompt

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	"github.com/spade-pipeline/spade/engines/model"
)

// Generation kinds (SPADE sec. 4, "Generation").
const (
	// KindReasoning is a single-turn reasoning task.
	KindReasoning = "reasoning"
	// KindGame is a generic multi-turn game.
	KindGame = "game"
	// KindGrounded is a corpus-grounded multi-turn environment.
	KindGrounded = "grounded"
	// KindToolUse is a tool-use workflow on a ToolUseEnv.
	KindToolUse = "tooluse"
)

// Kinds lists the generation kinds in a fixed order.
func Kinds() []string { return []string{KindReasoning, KindGame, KindGrounded, KindToolUse} }

// Bounds on the text a prompt carries, in characters (Unicode code points).
const (
	// DefaultExcerptChars bounds each grounding document's excerpt, in
	// characters (Unicode code points, as Excerpt counts them).
	DefaultExcerptChars = 1500
	// DefaultSeedSourceChars bounds each memory seed's source excerpt, in
	// characters (code points).
	DefaultSeedSourceChars = 1200
	// MaxFeedbackChars bounds the retry feedback text, in characters (code
	// points).
	MaxFeedbackChars = 2000
	// MaxPreviousSourceChars bounds the failed attempt's source shown on
	// retry, in characters (code points).
	MaxPreviousSourceChars = 6000
	// MaxHintSourceChars bounds the environment source given to the hint
	// call, in characters (code points).
	MaxHintSourceChars = 48000
	// HintMaxWords is the hint length the hint prompt asks for, in words.
	HintMaxWords = 150
)

// Errors callers branch on.
var (
	// ErrUnknownKind means the kind is not one of Kinds().
	ErrUnknownKind = errors.New("prompt: unknown generation kind")
	// ErrMissingInput means a required Input field is empty.
	ErrMissingInput = errors.New("prompt: missing input")
)

// Doc is one grounding document (a corpus row) as the prompt shows it.
type Doc struct {
	// ID identifies the corpus row; it is not shown to the model.
	ID string
	// Title is shown as the document's heading, whitespace collapsed.
	Title string
	// Text is the document body; the prompt shows its first ExcerptChars
	// characters, cut at a word boundary.
	Text string
}

// Seed is one environment-memory entry shown to the designer (SPADE sec. 4
// step 7): a regret-scored example, or a negative outside the band.
type Seed struct {
	// Name is the example's heading in the prompt (the design stage passes
	// the memory entry's family).
	Name string
	// Skill is the entry's skill; the prompt does not show it.
	Skill string
	// Description is a one- or two-sentence summary of the environment.
	Description string
	// WinRate is the share of unhinted plays won, in [0, 1].
	WinRate float64
	// Regret is mean return with hint minus mean return without.
	Regret float64
	// Source is the environment code; examples show an excerpt of it,
	// negatives do not.
	Source string
}

// Input is everything a designer prompt is rendered from.
type Input struct {
	// Kind is the generation kind; if set it must equal Render's kind.
	Kind string
	// Skill names the target cognitive skill (required), e.g.
	// "logical deduction".
	Skill string
	// SkillDescription explains the skill; empty uses the built-in
	// description of the six project skills (SkillDescriptions).
	SkillDescription string
	// Setting is optional free text about the slot (domain, theme).
	Setting string
	// Docs are the grounding documents (at least one for KindGrounded).
	Docs []Doc
	// Seeds are learnable examples from environment memory.
	Seeds []Seed
	// Negatives are memory entries outside the learnable band.
	Negatives []Seed
	// Feedback describes why the previous attempt failed (parse error,
	// validation failure); empty on the first attempt.
	Feedback string
	// PreviousSource is the failed attempt's code, shown with Feedback.
	PreviousSource string
	// ExcerptChars bounds each document excerpt, in characters (code
	// points; <= 0: DefaultExcerptChars).
	ExcerptChars int
	// SeedSourceChars bounds each seed source excerpt, in characters
	// (code points; 0: DefaultSeedSourceChars; negative: no source shown).
	SeedSourceChars int
}

// SkillDescriptions are the built-in descriptions of the project's six
// skills (SPADE sec. 4 "Skill curriculum" names three; the project names
// the rest).
var SkillDescriptions = map[string]string{
	"logical deduction":      "deriving what must be true from a set of rules and observations",
	"spatial reasoning":      "tracking positions, directions, shapes and movement in space",
	"causal inference":       "working out what causes what from interventions and their effects",
	"planning":               "choosing a sequence of actions that reaches a goal under constraints",
	"pattern induction":      "inferring a hidden rule from examples and applying it to new cases",
	"quantitative reasoning": "multi-step calculation, estimation and reasoning about quantities",
}

// SkillDescription is the built-in description of a skill named as the
// config names it (sample.skills: "spatial_reasoning") or as the prompt
// shows it ("spatial reasoning"): case, underscores, hyphens and spacing
// do not matter. "" for a skill without one.
func SkillDescription(skill string) string {
	key := strings.Join(strings.Fields(strings.NewReplacer("_", " ", "-", " ").Replace(strings.ToLower(skill))), " ")
	return SkillDescriptions[key]
}

//go:embed templates/*.tmpl
var templateFS embed.FS

var templates = template.Must(template.New("prompt").
	Funcs(template.FuncMap{"add": func(a, b int) int { return a + b }}).
	Option("missingkey=error").
	ParseFS(templateFS, "templates/*.tmpl"))

type docView struct{ Title, Excerpt string }

type seedView struct {
	Name, Description, Source, Verdict string
	WinRate, Regret                    string
}

type designView struct {
	Skill, SkillDescription, Setting string
	Docs                             []docView
	Seeds, Negatives                 []seedView
	Feedback, PreviousSource         string
}

// Render renders the designer prompt for one generation kind as a system
// and a user message. Errors: ErrUnknownKind; ErrMissingInput (wrapped,
// naming the field) when Skill is empty, or Docs is empty for
// KindGrounded, or in.Kind disagrees with kind.
func Render(kind string, in Input) ([]model.Message, error) {
	if !isKind(kind) {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownKind, kind, strings.Join(Kinds(), ", "))
	}
	if in.Kind != "" && in.Kind != kind {
		return nil, fmt.Errorf("%w: field Kind is %q but rendering %q", ErrMissingInput, in.Kind, kind)
	}
	if strings.TrimSpace(in.Skill) == "" {
		return nil, fmt.Errorf("%w: field Skill is empty (kind %s)", ErrMissingInput, kind)
	}
	if kind == KindGrounded && len(in.Docs) == 0 {
		return nil, fmt.Errorf("%w: field Docs is empty; kind %s needs a grounding document", ErrMissingInput, kind)
	}
	excerptChars := in.ExcerptChars
	if excerptChars <= 0 {
		excerptChars = DefaultExcerptChars
	}
	seedChars := in.SeedSourceChars
	if seedChars == 0 {
		seedChars = DefaultSeedSourceChars
	}
	v := designView{
		Skill:            oneLine(in.Skill),
		SkillDescription: in.SkillDescription,
		Setting:          strings.TrimSpace(in.Setting),
		Feedback:         Excerpt(strings.TrimSpace(in.Feedback), MaxFeedbackChars),
	}
	if v.SkillDescription == "" {
		v.SkillDescription = SkillDescription(v.Skill)
	}
	if v.Feedback != "" {
		v.PreviousSource = codeExcerpt(in.PreviousSource, MaxPreviousSourceChars)
	}
	for _, d := range in.Docs {
		v.Docs = append(v.Docs, docView{Title: oneLine(d.Title), Excerpt: Excerpt(strings.TrimSpace(d.Text), excerptChars)})
	}
	for _, s := range in.Seeds {
		sv := seedFor(s, "")
		if seedChars > 0 {
			sv.Source = codeExcerpt(s.Source, seedChars)
		}
		v.Seeds = append(v.Seeds, sv)
	}
	for _, s := range in.Negatives {
		verdict := "too hard or broken"
		if s.WinRate >= 0.5 {
			verdict = "too easy"
		}
		v.Negatives = append(v.Negatives, seedFor(s, verdict))
	}
	user, err := execute(kind, v)
	if err != nil {
		return nil, err
	}
	system, err := execute("designer_system", nil)
	if err != nil {
		return nil, err
	}
	return []model.Message{
		{Role: model.RoleSystem, Content: system},
		{Role: model.RoleUser, Content: user},
	}, nil
}

// RenderHint renders the designer-side hint call for one environment
// (SPADE sec. 4 step 5): the model reads the source and writes a hint the
// agent will get without the source. kind and skill may be empty. The
// source is normalised and cut to MaxHintSourceChars. Errors:
// ErrMissingInput when source is blank.
func RenderHint(source, kind, skill string) ([]model.Message, error) {
	src := NormalizeSource(source)
	if src == "" {
		return nil, fmt.Errorf("%w: environment source is empty", ErrMissingInput)
	}
	v := struct {
		Source, Kind, Skill string
		MaxWords            int
	}{codeExcerpt(src, MaxHintSourceChars), oneLine(kind), oneLine(skill), HintMaxWords}
	user, err := execute("hint", v)
	if err != nil {
		return nil, err
	}
	system, err := execute("hint_system", nil)
	if err != nil {
		return nil, err
	}
	return []model.Message{
		{Role: model.RoleSystem, Content: system},
		{Role: model.RoleUser, Content: user},
	}, nil
}

// AgentSystem returns the reasoning agent's system prompt: text-action
// play, or tool calling when toolUse, with a hint section when hint is not
// blank (the hinted plays of SPADE sec. 4 step 6). format is
// rollout.action_format (engines/action): the prompt asks for the
// form the reply will be parsed in (valid_actions: the listed action,
// alone on the last line after any reasoning; boxed: reasoning, then
// \boxed{action}, as the public code asks; answer_tag:
// <answer>action</answer>; raw: the action and nothing else). It panics
// only if the embedded template is broken, which the package tests rule
// out.
func AgentSystem(hint string, toolUse bool, format string) string {
	s, err := execute("agent_system", struct {
		Hint    string
		ToolUse bool
		Format  string
	}{strings.TrimSpace(hint), toolUse, format})
	if err != nil {
		panic(err)
	}
	return s
}

func execute(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("prompt: render template %s: %w", name, err)
	}
	return collapseBlankLines(b.String()), nil
}

func seedFor(s Seed, verdict string) seedView {
	return seedView{
		Name:        oneLine(s.Name),
		Description: oneLine(s.Description),
		WinRate:     strconv.FormatFloat(s.WinRate, 'f', 2, 64),
		Regret:      strconv.FormatFloat(s.Regret, 'f', 2, 64),
		Verdict:     verdict,
	}
}

func isKind(k string) bool {
	for _, x := range Kinds() {
		if x == k {
			return true
		}
	}
	return false
}

// oneLine collapses whitespace so a title or name cannot break the
// prompt's structure.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// collapseBlankLines trims the text and turns runs of blank lines into
// one, so optional template sections leave no gaps. Lines inside ```
// fences (source code) are left exactly as they are.
func collapseBlankLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	out := make([]string, 0, len(lines))
	blank, code := false, false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			code = !code
		} else if code {
			out = append(out, l)
			continue
		}
		l = strings.TrimRight(l, " \t")
		if l == "" {
			if blank {
				continue
			}
			blank = true
		} else {
			blank = false
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// codeExcerpt normalises source and bounds it for a ``` block in a
// prompt: no final newline (the template adds the closing fence line).
func codeExcerpt(src string, limit int) string {
	return strings.TrimSuffix(Excerpt(NormalizeSource(src), limit), "\n")
}

// Excerpt returns s cut to at most limit characters (code points): at the
// last whitespace in the final fifth of the limit when there is one, with
// " [...]" appended when anything was cut. limit <= 0 returns "".
func Excerpt(s string, limit int) string {
	if limit <= 0 {
		return ""
	}
	r := []rune(s)
	if len(r) <= limit {
		return s
	}
	cut := limit
	for i := limit; i > limit*4/5; i-- {
		if r[i] == ' ' || r[i] == '\n' || r[i] == '\t' {
			cut = i
			break
		}
	}
	return strings.TrimRight(string(r[:cut]), " \n\t") + " [...]"
}
