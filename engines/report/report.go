// Package report renders a run as one offline HTML page: inline SVG plots
// over rounds of the round metrics (learnable fraction, win rate, regret,
// diversity, validity, held-out scores), of the agent's replies (length,
// cut replies, unextracted actions, on_policy) and of the training
// dynamics (loss, gradient norm, clip fraction, KL, trained tokens,
// log-prob mismatch, zero-variance groups), per-round tables, and the
// metric definitions (docs/metrics.md) rendered from Markdown. A value
// with no data shows as "no data", a gap or "–", never as 0. The page
// loads nothing (no scripts, fonts, stylesheets or images from anywhere),
// so it can be archived next to the run's tables and opened years later.
package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// RoundSummary is one round's metrics as the report shows them;
// roundmetrics.Summary fills it from the round's metrics table, which the
// metrics stage writes (definitions in docs/metrics.md). Rates and shares
// are in [0, 1]. A float field that is NaN was not measured this round
// (e.g. validity on a round without regeneration) and shows as a gap in
// plots and "–" in the table. "Played environments" are the round's labels
// rows that are valid and have at least one play: on a regeneration round
// the environments it designed, on other rounds the pool carried forward.
type RoundSummary struct {
	// Round is the GRPO step number; rounds must be strictly increasing.
	Round int
	// Regeneration is true on rounds that generated a fresh pool (every k
	// rounds, docs/method.md step 8); other rounds carry the pool forward.
	Regeneration bool
	// Environments is the row count of the round's environments table:
	// the distinct sources the slots' final attempts produced, valid or
	// not (a slot whose attempts produced no code has none; two slots with
	// the same source share one). It is not the number of design slots.
	// 0 off regeneration rounds.
	Environments int
	// Valid is how many of those environments passed validation (0 off
	// regeneration rounds).
	Valid int
	// Admitted is the row count of the round's pool table: on a
	// regeneration round the environments admitted this round (valid,
	// with a win rate in the learnable band), on other rounds the pool
	// carried forward.
	Admitted int
	// ValidityRate is Valid divided by the number of design slots of the
	// round (rows of the slots table; a slot counts once however many
	// attempts it took), the paper's validity (app. F). NaN off
	// regeneration rounds.
	ValidityRate float64
	// LearnableFraction is the share of played environments whose win
	// rate is in the learnable band [label.band_low, label.band_high]
	// (default [0.2, 0.8]), bounds included.
	LearnableFraction float64
	// WinRate is the mean over played environments of their win rate: the
	// share of an environment's unhinted plays that succeeded, success
	// being the last step's info["success"] when the environment reports
	// it, else a return > 0; a play that ended in an error is a loss.
	WinRate float64
	// RegretMean and the quantiles (type 7) describe hint-based regret
	// (mean return with hint − without) over played environments that
	// have one: regeneration rounds only, NaN otherwise.
	RegretMean, RegretP10, RegretP50, RegretP90 float64
	// VendiPerN is the Vendi score of the sources of the round's valid
	// environments over TF-IDF + LSA-128, divided by their number
	// (metrics.VendiPerN); NaN off regeneration rounds or when no
	// environment is valid.
	VendiPerN float64
	// DomainsCovered is how many of the 13 coverage domains the grounding
	// documents of the round's slots touch; 0 off regeneration rounds.
	DomainsCovered int
	// DomainCoverage is DomainsCovered / 13, in [0, 1]; NaN on rounds
	// without regeneration.
	DomainCoverage float64
	// RewardLevels is the mean, over the environments played this round
	// (hinted and unhinted plays together), of the number of distinct
	// reward levels (metrics.RewardGranularity).
	RewardLevels float64
	// PerSkillWinRate maps skill name to the mean win rate of its played
	// environments; the report lists skills in sorted order.
	PerSkillWinRate map[string]float64
	// OffPolicy is true when some of the round's model calls were answered
	// by a served model that was not the round's policy (metrics
	// on_policy = 0 with policy_calls > 0: a fixed server, a stale policy;
	// docs/design.md "The policy of a round"). A round without such calls (the
	// procedural model) is never off-policy.
	OffPolicy bool
	// Evals maps a held-out score's name, "<suite>/<task> <metric>" (e.g.
	// "reasoning_gym/basic_arithmetic accuracy"), to its value in [0, 1]
	// for the checkpoint round Round trained (the evals table of the round
	// and `spade eval`'s scores, docs/recipes.md "Evaluation"); nil when
	// the round was not evaluated. Rounds with scores get one more plot
	// and a table.
	Evals map[string]float64
	// Band is the learnable band the round was labelled with when it
	// differs from the run's (a fork's rounds up to its fork round were
	// labelled with its source run's config); nil means the run's band.
	Band *Band
	// PolicyCalls is the number of the round's model calls that a served
	// model answered (metrics policy_calls); 0 (the procedural model)
	// leaves on_policy without data: its plot and column say so rather
	// than show the metrics table's 0.
	PolicyCalls int
	// Training is the round's GRPO step from its train_metrics table
	// (stages/grpo.TrainSummary); nil when the round has none, shown as
	// "no data".
	Training *Training
	// Replies summarises the agent's replies in the round's unhinted
	// plays (stages/roundmetrics.ReplyStats over its rollouts table); nil
	// when not read, shown as "no data".
	Replies *Replies
}

//go:embed report.html.tmpl
var pageSource string

var page = template.Must(template.New("report").Parse(pageSource))

// Plot titles, also the <title> of each SVG; tests look for them.
const (
	TitleLearnable = "Learnable fraction"
	TitleWinRate   = "Agent win rate"
	TitleRegret    = "Regret (mean, p10–p90 band)"
	TitleDiversity = "Diversity (Vendi / n)"
	TitleValidity  = "Validity rate"
	TitleEvals     = "Held-out evaluation of each checkpoint"
)

// Band is the learnable band of win rates, bounds included (config
// label.band_low and label.band_high; docs/method.md, "Learnable band").
type Band struct {
	// Low and High are win rates in [0, 1], Low <= High.
	Low, High float64
}

// String renders the band as "[0.2, 0.8]".
func (b Band) String() string { return fmt.Sprintf("[%g, %g]", b.Low, b.High) }

// PlotCount is the number of <svg> plots Render writes when no round has
// evaluation scores (RoundSummary.Evals): five of the round metrics, four
// of the agent's replies and on_policy, seven of the training dynamics;
// with scores there is one more, TitleEvals, after the first five.
const PlotCount = 16

// Header is what the top of the page says about the run, from its pinned
// config (cmd/spade fills it; docs/metrics.md "Report"). Text fields are
// shown as given, escaped; an empty one shows as "not in this run's
// config", the place where settings that later configs add (the serving
// mode of model.serving, a training recipe) appear once runs pin them.
type Header struct {
	// Run is the run name.
	Run string
	// Band is the run's learnable band (label.band_low, label.band_high),
	// named in the learnable plot's label and the header; rounds with a
	// Band of their own are named there with theirs, by range of rounds.
	Band Band
	// Model names what answers the designer, hint and agent calls, e.g.
	// "procedural (offline stand-in, no weights)" or "openai Qwen/Qwen3-8B".
	Model string
	// Trainer names grpo.trainer and what it trains, e.g. "none (train_batch
	// written, no checkpoint trained)".
	Trainer string
	// Serving is the serving mode (model.serving: managed, reload, fixed;
	// docs/design.md "The policy of a round"); "" when the config has none.
	Serving string
	// Trains is true when grpo.trainer trains checkpoints (not "none"):
	// only then do off-policy rounds (RoundSummary.OffPolicy) get the
	// warning at the top of the page, since with no trainer every round's
	// policy is the base model whatever serves it.
	Trains bool
	// Recipe names the training recipe the run follows; "" when the config
	// has none.
	Recipe string
	// BaseEvals are the held-out scores of the base checkpoint (`spade
	// eval --round 0`), by the names RoundSummary.Evals uses, each in
	// [0, 1]; nil when it was not evaluated. They are the first row of the
	// scores' table ("0 (base)"), the reference the trained checkpoints
	// are read against.
	BaseEvals map[string]float64
	// ConfigDigest is the run's config digest (_RUN.json config_digest).
	ConfigDigest string
	// RegenerateEvery is k: a regeneration every k rounds; 0 if unknown,
	// and cmd/spade leaves it 0 unless every round shown was made with
	// the same k under design.mode designer (a fork's inherited rounds
	// may have another). The page names k only when it is set.
	RegenerateEvery int
	// FixedPool is true for a run under design.mode fixed_pool: no round
	// regenerates, every round plays the pool imported at round 0, and
	// the header says so instead of naming k.
	FixedPool bool
	// MetricsDoc is the Markdown of docs/metrics.md, rendered as HTML at
	// the end of the page (raw HTML in it left out) so that its
	// definitions are there offline; "" leaves it out (and the links name
	// the file only).
	MetricsDoc string
}

// Render writes the report of one run as one self-contained HTML5 document
// to w: the header h, PlotCount inline SVG plots over rounds in three
// groups (round metrics, with one more, the held-out scores, when a round
// has Evals; agent replies and on_policy; training dynamics), four tables
// (round metrics, win rate per skill, replies, training; a fifth of the
// scores) and h.MetricsDoc as HTML, at most 1,400 CSS pixels wide. The
// output is a pure function of its arguments (no timestamps, skills
// sorted, fixed number formatting), so reports can be diffed and
// golden-tested.
//
// Every plot spans the same rounds (first to last), marks the
// regeneration rounds when some rounds are not, draws a lone measured
// round (one whose neighbours are not measured: validity, diversity and
// regret off k = 1) as a marker, with its p10–p90 range as a bar where
// the plot has a band, and lists in its legend only what it draws. Win
// rate and learnable fraction are split by the population played: the
// environments designed that round (regeneration rounds) and the pool
// carried forward (other rounds), which differ by construction (the pool
// holds only environments admitted inside the band).
//
// The reply and training plots join every round in one line (they
// measure the policy, not an environment population); a plot with no
// measured round says "no data" and why.
//
// Errors: an error naming the round index, round number and field for
// rounds out of order, negative counts, rates or shares outside [0, 1]
// or ±Inf values (Training and Replies included); a band that is not
// 0 <= Low <= High <= 1; the error of w.
func Render(w io.Writer, h Header, rounds []RoundSummary) error {
	run, band := h.Run, h.Band
	if !(band.Low >= 0 && band.Low <= band.High && band.High <= 1) {
		return fmt.Errorf("render report for run %q: learnable band [%g, %g] is not within [0, 1] in order", run, band.Low, band.High)
	}
	if err := validate(rounds); err != nil {
		return fmt.Errorf("render report for run %q: %w", run, err)
	}
	for _, name := range sortedKeys(h.BaseEvals) {
		if v := h.BaseEvals[name]; !(v >= 0 && v <= 1) {
			return fmt.Errorf("render report for run %q: BaseEvals[%q] = %v is outside [0, 1]", run, name, v)
		}
	}
	for i, r := range rounds {
		if b := r.Band; b != nil && !(b.Low >= 0 && b.Low <= b.High && b.High <= 1) {
			return fmt.Errorf("render report for run %q: rounds[%d] (round %d): learnable band [%g, %g] is not within [0, 1] in order", run, i, r.Round, b.Low, b.High)
		}
	}
	doc, err := metricsHTML(h.MetricsDoc)
	if err != nil {
		return fmt.Errorf("render report for run %q: %w", run, err)
	}
	bands := bandLabel(band, rounds)
	data := pageData{Header: h, Rounds: len(rounds), Band: bands, RoundsText: roundsText(h, rounds), Doc: doc}
	for _, r := range rounds {
		if r.OffPolicy && h.Trains {
			data.OffPolicy = append(data.OffPolicy, r.Round)
		}
	}
	label := band.String()
	if bands != label {
		label = "of its round"
	}
	for _, group := range [][]chart{charts(rounds, label), replyCharts(rounds), trainCharts(rounds)} {
		var plots []template.HTML
		for _, c := range group {
			plots = append(plots, template.HTML(c.svg())) //nolint:gosec // built from escaped text and numbers only
		}
		data.Plots = append(data.Plots, plots)
	}
	data.Skills = skillsOf(rounds)
	data.Evals = keysOf(append(evalMaps(rounds), h.BaseEvals)...)
	if h.BaseEvals != nil {
		data.EvalRows = append(data.EvalRows, append([]string{"0 (base)"}, cells(h.BaseEvals, data.Evals, 3)...))
	}
	for _, r := range rounds {
		data.Rows = append(data.Rows, tableRow(r))
		data.SkillRows = append(data.SkillRows, skillRow(r, data.Skills))
		data.ReplyRows = append(data.ReplyRows, replyRow(r))
		data.TrainRows = append(data.TrainRows, trainRow(r))
		if r.Evals != nil {
			data.EvalRows = append(data.EvalRows, append([]string{strconv.Itoa(r.Round)}, cells(r.Evals, data.Evals, 3)...))
		}
	}
	if err := page.Execute(w, data); err != nil {
		return fmt.Errorf("render report for run %q: %w", run, err)
	}
	return nil
}

type pageData struct {
	Header
	Band                 string // the learnable band(s), "[0.2, 0.8]" (bandLabel)
	Rounds               int
	RoundsText           string            // roundsText
	OffPolicy            []int             // rounds answered by another policy than theirs, when the run trains
	Plots                [][]template.HTML // the groups: round metrics, replies, training
	Skills               []string
	Evals                []string // every score name of RoundSummary.Evals, sorted
	Rows, SkillRows      [][]string
	ReplyRows, TrainRows [][]string
	EvalRows             [][]string    // rounds with scores only
	Doc                  template.HTML // MetricsDoc as HTML
}

func validate(rounds []RoundSummary) error {
	for i, r := range rounds {
		where := fmt.Sprintf("rounds[%d] (round %d)", i, r.Round)
		if r.Round < 0 {
			return fmt.Errorf("%s: Round is negative", where)
		}
		if i > 0 && r.Round <= rounds[i-1].Round {
			return fmt.Errorf("%s: Round not after previous round %d", where, rounds[i-1].Round)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"Environments", r.Environments}, {"Valid", r.Valid}, {"Admitted", r.Admitted}, {"DomainsCovered", r.DomainsCovered}} {
			if f.v < 0 {
				return fmt.Errorf("%s: %s = %d is negative", where, f.name, f.v)
			}
		}
		rates := []struct {
			name string
			v    float64
		}{{"ValidityRate", r.ValidityRate}, {"LearnableFraction", r.LearnableFraction}, {"WinRate", r.WinRate},
			{"VendiPerN", r.VendiPerN}, {"DomainCoverage", r.DomainCoverage}}
		for _, skill := range sortedKeys(r.PerSkillWinRate) {
			rates = append(rates, struct {
				name string
				v    float64
			}{fmt.Sprintf("PerSkillWinRate[%q]", skill), r.PerSkillWinRate[skill]})
		}
		for _, name := range sortedKeys(r.Evals) {
			rates = append(rates, struct {
				name string
				v    float64
			}{fmt.Sprintf("Evals[%q]", name), r.Evals[name]})
			if math.IsNaN(r.Evals[name]) {
				return fmt.Errorf("%s: Evals[%q] is NaN (leave an unmeasured score out)", where, name)
			}
		}
		for _, f := range rates {
			if math.IsInf(f.v, 0) || f.v < 0 || f.v > 1 {
				return fmt.Errorf("%s: %s = %v is outside [0, 1]", where, f.name, f.v)
			}
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"RegretMean", r.RegretMean}, {"RegretP10", r.RegretP10}, {"RegretP50", r.RegretP50}, {"RegretP90", r.RegretP90}, {"RewardLevels", r.RewardLevels}} {
			if math.IsInf(f.v, 0) {
				return fmt.Errorf("%s: %s is infinite", where, f.name)
			}
		}
		if r.RegretP10 > r.RegretP90 {
			return fmt.Errorf("%s: RegretP10 %v above RegretP90 %v", where, r.RegretP10, r.RegretP90)
		}
		if err := validateTraining(where, r); err != nil {
			return err
		}
	}
	return nil
}

// bandLabel names the learnable band of the rounds: band.String() when
// every round used the run's band, else each band with its range of
// rounds in order, "[0.2, 0.8] (rounds 1–3), [0.1, 0.9] (rounds 4–6)".
func bandLabel(band Band, rounds []RoundSummary) string {
	of := func(r RoundSummary) Band {
		if r.Band != nil {
			return *r.Band
		}
		return band
	}
	same := true
	for _, r := range rounds {
		same = same && of(r) == band
	}
	if same {
		return band.String()
	}
	var parts []string
	for i := 0; i < len(rounds); {
		j := i
		for j+1 < len(rounds) && of(rounds[j+1]) == of(rounds[i]) {
			j++
		}
		span := fmt.Sprintf("round %d", rounds[i].Round)
		if j > i {
			span = fmt.Sprintf("rounds %d–%d", rounds[i].Round, rounds[j].Round)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", of(rounds[i]), span))
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// charts builds the five plots of the round metrics (and the held-out
// scores when a round has some) in page order; learnable names the band in
// the learnable plot's axis label ("[0.2, 0.8]" or "of its round").
func charts(rounds []RoundSummary, learnable string) []chart {
	pts := func(f func(RoundSummary) float64) []point {
		out := make([]point, len(rounds))
		for i, r := range rounds {
			out[i] = point{x: float64(r.Round), y: f(r), pop: population(r)}
		}
		return out
	}
	only := func(regen bool, f func(RoundSummary) float64) func(RoundSummary) float64 {
		return func(r RoundSummary) float64 {
			if r.Regeneration != regen {
				return math.NaN()
			}
			return f(r)
		}
	}
	main := func(name string, f func(RoundSummary) float64) series {
		return series{name: name, color: palette[0], width: strokeMain, points: pts(f)}
	}
	// byPopulation splits a per-environment mean into the two populations
	// a round can play (Render's doc).
	byPopulation := func(what string, f func(RoundSummary) float64) []series {
		return []series{
			{name: what + ", designed envs (regeneration rounds)", color: palette[0], width: strokeMain, points: pts(only(true, f))},
			{name: what + ", pool (other rounds)", color: poolColor, width: strokeMain, points: pts(only(false, f))},
		}
	}
	c := commonAxis(rounds)
	unit := func(id, title, yLabel string, s ...series) chart {
		return chart{id: id, title: title, yLabel: yLabel, yMin: 0, yMax: 1, series: s, axis: c}
	}

	win := byPopulation("all skills", func(r RoundSummary) float64 { return r.WinRate })
	for i, skill := range skillsOf(rounds) {
		win = append(win, series{
			name: skill, color: skillPalette[i%len(skillPalette)], width: strokeSecond, dashed: i >= len(skillPalette),
			points: pts(func(r RoundSummary) float64 {
				if v, ok := r.PerSkillWinRate[skill]; ok {
					return v
				}
				return math.NaN()
			}),
		})
	}
	regret := chart{
		id: "regret", title: TitleRegret, yLabel: "regret (return)", yMin: math.NaN(), yMax: math.NaN(), zeroLine: true, axis: c,
		series: []series{
			main("mean", func(r RoundSummary) float64 { return r.RegretMean }),
			{name: "median", color: palette[3], width: strokeSecond, dashed: true, points: pts(func(r RoundSummary) float64 { return r.RegretP50 })},
		},
		band: &band{name: "p10–p90", color: palette[0],
			lo: pts(func(r RoundSummary) float64 { return r.RegretP10 }),
			hi: pts(func(r RoundSummary) float64 { return r.RegretP90 })},
	}
	charts := []chart{
		unit("learnable", TitleLearnable, "share in band "+learnable, byPopulation("learnable", func(r RoundSummary) float64 { return r.LearnableFraction })...),
		unit("winrate", TitleWinRate, "win rate", win...),
		regret,
		unit("diversity", TitleDiversity, "Vendi score / n", main("Vendi/n", func(r RoundSummary) float64 { return r.VendiPerN })),
		unit("validity", TitleValidity, "share valid", main("validity", func(r RoundSummary) float64 { return r.ValidityRate })),
	}
	if names := keysOf(evalMaps(rounds)...); len(names) > 0 {
		var s []series
		for i, name := range names {
			// Only the evaluated rounds, so that a line joins the scores of
			// successive checkpoints (eval.every > 1 leaves rounds between)
			// whatever population each round played.
			var ps []point
			for _, r := range rounds {
				if v, ok := r.Evals[name]; ok {
					ps = append(ps, point{x: float64(r.Round), y: v})
				}
			}
			s = append(s, series{name: name, color: skillPalette[i%len(skillPalette)], width: strokeMain, dashed: i >= len(skillPalette), points: ps})
		}
		charts = append(charts, unit("heldout", TitleEvals, "score", s...))
	}
	return charts
}

// evalMaps returns each round's Evals (nil for a round not evaluated).
func evalMaps(rounds []RoundSummary) []map[string]float64 {
	var out []map[string]float64
	for _, r := range rounds {
		out = append(out, r.Evals)
	}
	return out
}

// keysOf returns the keys of all of ms, each once, sorted.
func keysOf(ms ...map[string]float64) []string {
	var out []string
	for _, m := range ms {
		for k := range m {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// cells formats m's values in the order of names with prec decimals, "–"
// where m has none.
func cells(m map[string]float64, names []string, prec int) []string {
	out := make([]string, 0, len(names))
	for _, name := range names {
		if v, ok := m[name]; ok {
			out = append(out, cell(v, prec))
		} else {
			out = append(out, "–")
		}
	}
	return out
}

// population is 0 for a regeneration round (it plays the environments it
// designed) and 1 for a round that plays the pool carried forward: lines
// never join rounds of different populations.
func population(r RoundSummary) int {
	if r.Regeneration {
		return 0
	}
	return 1
}

// commonAxis is the round axis every plot shares: the report's first to
// last round, half a round of margin on each side so that markers and bars
// at the ends are drawn whole, and the regeneration rounds to mark (none
// when every round regenerates: there is nothing to tell apart).
func commonAxis(rounds []RoundSummary) axis {
	if len(rounds) == 0 {
		return axis{x0: 0, x1: 1}
	}
	a := axis{x0: float64(rounds[0].Round) - 0.5, x1: float64(rounds[len(rounds)-1].Round) + 0.5}
	all := true
	for _, r := range rounds {
		if r.Regeneration {
			a.regen = append(a.regen, float64(r.Round))
		} else {
			all = false
		}
	}
	if all {
		a.regen = nil
	}
	return a
}

// skillsOf returns every skill named in any round, sorted.
func skillsOf(rounds []RoundSummary) []string {
	var ms []map[string]float64
	for _, r := range rounds {
		ms = append(ms, r.PerSkillWinRate)
	}
	return keysOf(ms...)
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// tableRow formats one round; columns match the first table's header in
// the template.
func tableRow(r RoundSummary) []string {
	kind := kindOf(r)
	domains := "–"
	if !math.IsNaN(r.DomainCoverage) {
		domains = fmt.Sprintf("%d/13 (%s)", r.DomainsCovered, cell(r.DomainCoverage, 2))
	}
	envs, valid := "–", "–" // no environment is designed off regeneration rounds
	if r.Regeneration {
		envs, valid = strconv.Itoa(r.Environments), strconv.Itoa(r.Valid)
	}
	return []string{
		strconv.Itoa(r.Round), kind, envs, valid, strconv.Itoa(r.Admitted),
		cell(r.ValidityRate, 3), cell(r.LearnableFraction, 3), cell(r.WinRate, 3),
		cell(r.RegretMean, 3), cell(r.RegretP10, 3), cell(r.RegretP50, 3), cell(r.RegretP90, 3),
		cell(r.VendiPerN, 3), domains,
		cell(r.RewardLevels, 1),
	}
}

// kindOf is the tables' "round kind": regeneration or pool.
func kindOf(r RoundSummary) string {
	if r.Regeneration {
		return "regeneration"
	}
	return "pool"
}

// skillRow formats one round's win rate per skill, in the order of skills.
func skillRow(r RoundSummary, skills []string) []string {
	return append([]string{strconv.Itoa(r.Round), kindOf(r)}, cells(r.PerSkillWinRate, skills, 2)...)
}

func cell(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Trim(s, "-0.") == "" {
		s = strings.TrimPrefix(s, "-") // no "-0.000"
	}
	return s
}
