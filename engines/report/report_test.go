package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.html from the current output")

// sampleRounds is a deterministic run of n rounds: regeneration every 4
// rounds (validity, diversity and regret measured only then, as the
// metrics stage does), win rate climbing as in the paper's training
// curves, three skills active in turn.
func sampleRounds(n int) []RoundSummary { return sampleRoundsK(n, 4) }

// sampleRoundsK is sampleRounds with a regeneration every k rounds.
func sampleRoundsK(n, k int) []RoundSummary {
	skills := []string{"causal-inference", "logical-deduction", "spatial-reasoning", "planning"}
	var out []RoundSummary
	for i := 0; i < n; i++ {
		t := float64(i) / float64(max(n-1, 1))
		r := RoundSummary{
			Round:             i,
			Regeneration:      i%k == 0,
			Admitted:          8 + i%5,
			LearnableFraction: 0.16 + 0.15*t + 0.03*math.Sin(float64(i)),
			WinRate:           0.30 + 0.32*t + 0.02*math.Cos(float64(i)*1.7),
			RegretMean:        0.12 + 0.05*math.Sin(float64(i)/3),
			RewardLevels:      2 + 3*t,
			ValidityRate:      math.NaN(),
			VendiPerN:         math.NaN(),
			DomainCoverage:    math.NaN(),
			PerSkillWinRate:   map[string]float64{},
		}
		r.RegretP10 = r.RegretMean - 0.18
		r.RegretP50 = r.RegretMean - 0.02
		r.RegretP90 = r.RegretMean + 0.22
		if !r.Regeneration {
			r.RegretMean, r.RegretP10, r.RegretP50, r.RegretP90 = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		}
		if r.Regeneration {
			r.Environments, r.Valid = 24, 20+i%4
			r.ValidityRate = float64(r.Valid) / 24
			r.VendiPerN = 0.55 + 0.15*t
			r.DomainsCovered = 5 + i%6
			r.DomainCoverage = float64(r.DomainsCovered) / 13
		}
		for j := 0; j < 3; j++ {
			s := skills[(i/4+j)%len(skills)]
			r.PerSkillWinRate[s] = math.Min(1, r.WinRate+0.1*float64(j-1))
		}
		r.Training, r.Replies = sampleTraining(i, n, t), sampleReplies(i, n, t)
		if i >= 2 {
			r.PolicyCalls = 96 + i
		}
		out = append(out, r)
	}
	return out
}

// sampleTraining is round i of n's training summary (t = i/(n-1)): the
// loss and gradient norm falling, KL growing, and in the first half of
// the run no sampler log-probs (a server without them), so no mismatch.
func sampleTraining(i, n int, t float64) *Training {
	tr := &Training{
		Trained: true, Steps: 2,
		Loss: -0.02 + 0.015*math.Sin(float64(i)/2), GradNorm: 0.9 - 0.4*t + 0.05*math.Cos(float64(i)),
		ClipFraction: 0.04 + 0.02*math.Sin(float64(i)/3), KL: 0.001 + 0.004*t,
		TrainedTokens: 12000 + 300*float64(i%7), AgentGroups: 16, ZeroVarianceGroups: float64(i % 5),
		LogprobMismatchMean: math.NaN(), LogprobMismatchMax: math.NaN(), SamplerLogprobTokens: 0, TISClipFraction: math.NaN(),
	}
	tr.ZeroVarianceShare = tr.ZeroVarianceGroups / tr.AgentGroups
	if i >= n/2 {
		tr.LogprobMismatchMean, tr.LogprobMismatchMax = 0.01+0.004*math.Sin(float64(i)), 0.3+0.1*t
		tr.SamplerLogprobTokens, tr.TISClipFraction = 9000, 0.002+0.001*t
	}
	return tr
}

// sampleReplies is round i of n's reply summary: replies growing longer,
// token ids reported in the second half only (as sampleTraining's
// sampler log-probs).
func sampleReplies(i, n int, t float64) *Replies {
	p := &Replies{
		Plays: 32, Replies: 96 + i%3, CharsMean: 400 + 250*t, CharsP90: 900 + 400*t,
		TokensMean: math.NaN(), TokensP90: math.NaN(),
		CutShare: 0.02 + 0.08*t, AgentCutShare: 0.05 + 0.1*t, UnextractedShare: 0.12 - 0.08*t,
	}
	if i >= n/2 {
		p.TokenReplies, p.TokensMean, p.TokensP90 = p.Replies, 110+70*t, 250+90*t
	}
	return p
}

func render(t testing.TB, run string, rounds []RoundSummary) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, testHeader(run), rounds); err != nil {
		t.Fatalf("Render: %v", err)
	}
	return b.Bytes()
}

// testHeader is a run header as cmd/spade fills it for the default run,
// without the serving mode and recipe that its config does not have.
func testHeader(run string) Header {
	return Header{
		Run: run, Band: Band{0.2, 0.8},
		Model:           "procedural (offline stand-in, no weights)",
		Trainer:         "none (train_batch written, no checkpoint trained)",
		ConfigDigest:    "sha256:0123456789abcdef",
		RegenerateEvery: 4,
		MetricsDoc:      "# Round metrics: definitions\n\nWin rate <b>is</b> the share of unhinted plays won.\n",
	}
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rounds []RoundSummary
	}{
		{"sample40", sampleRounds(40)},
		{"single", sampleRounds(1)},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, "golden-run", tc.rounds)
			path := filepath.Join("testdata", tc.name+".golden.html")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("output differs from %s (run go test -update after checking the change)", path)
			}
		})
	}
}

// TestRenderDeterministic renders the same rounds repeatedly; per-skill
// maps are iterated in random order by Go, so this catches any map order
// reaching the output.
func TestRenderDeterministic(t *testing.T) {
	first := render(t, "run", sampleRounds(12))
	for i := 0; i < 10; i++ {
		if again := render(t, "run", sampleRounds(12)); !bytes.Equal(first, again) {
			t.Fatalf("render %d differs from the first", i+2)
		}
	}
}

var svgRe = regexp.MustCompile(`(?s)<svg .*?</svg>`)

// TestRenderStructure checks what a reader relies on: five well-formed
// SVG plots with their titles, a row per round, gaps for NaN, and nothing
// that would load from the network.
func TestRenderStructure(t *testing.T) {
	rounds := sampleRounds(40)
	out := string(render(t, "run-a", rounds))
	svgs := svgRe.FindAllString(out, -1)
	if len(svgs) != PlotCount {
		t.Fatalf("%d SVG plots, want %d", len(svgs), PlotCount)
	}
	for i, s := range svgs {
		if err := wellFormed(s); err != nil {
			t.Fatalf("SVG %d is not well-formed XML: %v", i, err)
		}
	}
	for _, title := range []string{TitleLearnable, TitleWinRate, TitleRegret, TitleDiversity, TitleValidity} {
		if !strings.Contains(out, "<title id=") || !strings.Contains(out, title) {
			t.Errorf("plot title %q missing", title)
		}
	}
	// Four tables (rounds, skills, replies, training), a row per round in
	// each.
	if got := strings.Count(out, "<tr><td>"); got != 4*len(rounds) {
		t.Errorf("%d table rows, want %d", got, 4*len(rounds))
	}
	// Validity is measured on 10 of 40 rounds, every 4th: 10 markers, no
	// line joining them across the unmeasured rounds, and the 10
	// regeneration rounds marked.
	validity := svgs[4]
	if got := strings.Count(validity, `class="marker"`); got != 10 {
		t.Errorf("validity plot has %d markers, want 10", got)
	}
	if strings.Contains(validity, "<polyline") {
		t.Errorf("validity plot joins rounds it did not measure")
	}
	for i, s := range svgs {
		if got := strings.Count(s, `class="regen"`); got != 10 {
			t.Errorf("plot %d marks %d regeneration rounds, want 10", i, got)
		}
	}
	// Regret exists on the 10 regeneration rounds, none adjacent: 10
	// p10–p90 bars with a mean and a median marker each, no band.
	regret := svgs[2]
	if got := strings.Count(regret, `class="bar"`); got != 10 {
		t.Errorf("regret plot has %d bars, want 10", got)
	}
	if strings.Contains(regret, `class="band"`) {
		t.Errorf("regret plot draws a band across rounds without regret")
	}
	for _, name := range []string{"mean", "median"} {
		if got := strings.Count(regret, `class="marker" data-series="`+name+`"`); got != 10 {
			t.Errorf("regret plot has %d %s markers, want 10", got, name)
		}
	}
	// Win rate: the designed population on the 10 regeneration rounds
	// (markers), the pool on the 30 others (lines of 3 rounds each).
	win := svgs[1]
	if got := strings.Count(win, `class="marker" data-series="all skills, designed envs (regeneration rounds)"`); got != 10 {
		t.Errorf("win-rate plot has %d designed markers, want 10", got)
	}
	if got := strings.Count(win, `class="series" data-series="all skills, pool (other rounds)"`); got != 10 {
		t.Errorf("win-rate plot has %d pool lines, want 10", got)
	}
	// k = 1: every round regenerates, so regret is a band over adjacent
	// rounds, and no round is marked (there is nothing to tell apart).
	every := svgRe.FindAllString(string(render(t, "run-k1", sampleRoundsK(12, 1))), -1)
	if got := strings.Count(every[2], `class="band"`); got != 1 {
		t.Errorf("k=1 regret plot has %d bands, want 1", got)
	}
	if strings.Contains(every[2], `class="bar"`) || strings.Contains(every[2], `class="regen"`) {
		t.Errorf("k=1 regret plot draws bars or regeneration marks")
	}
	if strings.Contains(every[1], "pool (other rounds)") {
		t.Errorf("k=1 win-rate plot lists a pool population it does not draw")
	}
	for _, banned := range []string{"<script", "http://", "https://", "<link", "@import", "url("} {
		if strings.Contains(strings.ReplaceAll(out, `xmlns="http://www.w3.org/2000/svg"`, ""), banned) {
			t.Errorf("report contains %q: it must load nothing", banned)
		}
	}
	for _, skill := range []string{"causal-inference", "logical-deduction", "planning", "spatial-reasoning"} {
		if !strings.Contains(out, "<th>"+skill+"</th>") {
			t.Errorf("table lacks a column for skill %q", skill)
		}
	}
}

func TestRenderEscapes(t *testing.T) {
	rounds := sampleRounds(3)
	rounds[1].PerSkillWinRate["<script>alert(1)</script>"] = 0.5
	out := string(render(t, `run "<b>&`, rounds))
	if strings.Contains(out, "<script>") || strings.Contains(out, "<b>&") {
		t.Fatal("untrusted run or skill name reached the page unescaped")
	}
	for i, s := range svgRe.FindAllString(out, -1) {
		if err := wellFormed(s); err != nil {
			t.Fatalf("SVG %d: %v", i, err)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func([]RoundSummary)
		want   string
	}{
		{"out of order", func(r []RoundSummary) { r[2].Round = 1 }, "rounds[2] (round 1): Round not after previous round 1"},
		{"negative round", func(r []RoundSummary) { r[0].Round = -1 }, "rounds[0] (round -1): Round is negative"},
		{"rate above one", func(r []RoundSummary) { r[1].WinRate = 1.5 }, "rounds[1] (round 1): WinRate = 1.5 is outside [0, 1]"},
		{"infinite vendi", func(r []RoundSummary) { r[1].VendiPerN = math.Inf(1) }, "VendiPerN = +Inf is outside [0, 1]"},
		{"skill rate", func(r []RoundSummary) { r[0].PerSkillWinRate["planning"] = -0.1 }, `PerSkillWinRate["planning"] = -0.1`},
		{"negative count", func(r []RoundSummary) { r[2].Valid = -3 }, "rounds[2] (round 2): Valid = -3 is negative"},
		{"infinite regret", func(r []RoundSummary) { r[0].RegretP90 = math.Inf(1) }, "RegretP90 is infinite"},
		{"crossed quantiles", func(r []RoundSummary) { r[0].RegretP10 = 1 }, "RegretP10 1 above RegretP90"},
		{"clip fraction above one", func(r []RoundSummary) { r[1].Training.ClipFraction = 1.5 }, "rounds[1] (round 1): Training.ClipFraction = 1.5 is outside [0, 1]"},
		{"infinite loss", func(r []RoundSummary) { r[2].Training.Loss = math.Inf(-1) }, "rounds[2] (round 2): Training.Loss is infinite"},
		{"negative trained tokens", func(r []RoundSummary) { r[0].Training.TrainedTokens = -1 }, "Training count or norm is negative"},
		{"cut share", func(r []RoundSummary) { r[1].Replies.CutShare = -0.5 }, "Replies.CutShare = -0.5 is outside [0, 1]"},
		{"negative policy calls", func(r []RoundSummary) { r[0].PolicyCalls = -2 }, "PolicyCalls = -2 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rounds := sampleRounds(3)
			tt.mutate(rounds)
			err := Render(io.Discard, Header{Run: "r", Band: Band{0.2, 0.8}}, rounds)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{-0.1, 0.4, []float64{-0.1, 0, 0.1, 0.2, 0.3, 0.4}},
		{0, 39, []float64{0, 10, 20, 30}},
	}
	for _, tt := range tests {
		got := ticks(tt.lo, tt.hi)
		if len(got) != len(tt.want) {
			t.Fatalf("ticks(%v, %v) = %v, want %v", tt.lo, tt.hi, got, tt.want)
		}
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-12 {
				t.Fatalf("ticks(%v, %v) = %v, want %v", tt.lo, tt.hi, got, tt.want)
			}
		}
	}
	if got := integerTicks(0, 3); len(got) != 4 || got[3] != 3 {
		t.Fatalf("integerTicks(0, 3) = %v", got)
	}
}

func wellFormed(s string) error {
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// FuzzRender: run and skill names come from config and LLM-designed
// environments. Whatever they hold, Render must succeed, every SVG must
// stay well-formed and no raw tag may appear.
func FuzzRender(f *testing.F) {
	f.Add("run", "planning", 0.5)
	f.Add(`<script>"&'`, "]]><!--", 0.0)
	f.Add("\xff\xfe", "\x00", 1.0)
	f.Fuzz(func(t *testing.T, run, skill string, rate float64) {
		if math.IsNaN(rate) || rate < 0 || rate > 1 {
			rate = 0.5
		}
		rounds := sampleRounds(3)
		rounds[2].PerSkillWinRate[skill] = rate
		var b bytes.Buffer
		if err := Render(&b, Header{Run: run, Band: Band{0.2, 0.8}}, rounds); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		svgs := svgRe.FindAllString(out, -1)
		if len(svgs) != PlotCount {
			t.Fatalf("%d SVGs", len(svgs))
		}
		for i, s := range svgs {
			if err := wellFormed(s); err != nil {
				t.Fatalf("SVG %d: %v", i, err)
			}
		}
		if strings.Contains(out, "<script") {
			t.Fatal("raw <script> in output")
		}
	})
}

// TestRenderNamesTheRunsBand: the learnable plot and the header name the
// band the run labelled with, not the default one.
func TestRenderNamesTheRunsBand(t *testing.T) {
	var b bytes.Buffer
	if err := Render(&b, Header{Run: "r", Band: Band{0.3, 0.6}}, sampleRounds(3)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "[0.3, 0.6]"); n != 2 {
		t.Errorf("band [0.3, 0.6] named %d times, want 2 (plot label and header)", n)
	}
	if strings.Contains(out, "[0.2, 0.8]") {
		t.Error("the default band is still named")
	}
	for _, bad := range []Band{{0.8, 0.2}, {-0.1, 0.5}, {0.2, 1.5}, {math.NaN(), 0.5}} {
		if err := Render(io.Discard, Header{Run: "r", Band: bad}, sampleRounds(3)); err == nil || !strings.Contains(err.Error(), "learnable band") {
			t.Errorf("band %v: error %v, want one naming the learnable band", bad, err)
		}
	}
}

// TestRenderNamesEachRoundsBand: rounds labelled with another band (a
// fork's inherited rounds) are named with theirs, by range of rounds, and
// a bad per-round band is refused.
func TestRenderNamesEachRoundsBand(t *testing.T) {
	rounds := sampleRounds(4)
	src := Band{0.2, 0.8}
	rounds[0].Band, rounds[1].Band = &src, &src
	var b bytes.Buffer
	if err := Render(&b, Header{Run: "r", Band: Band{0.1, 0.8}}, rounds); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	want := "[0.2, 0.8] (rounds 0–1), [0.1, 0.8] (rounds 2–3)"
	if !strings.Contains(out, "win rate in "+want+".") {
		t.Errorf("header does not name %q", want)
	}
	if !strings.Contains(out, "share in band of its round") {
		t.Error("the learnable plot's label names a single band")
	}
	bad := Band{0.9, 0.1}
	rounds[2].Band = &bad // sampleRounds numbers rounds from 0
	if err := Render(io.Discard, Header{Run: "r", Band: Band{0.1, 0.8}}, rounds); err == nil || !strings.Contains(err.Error(), "(round 2)") {
		t.Errorf("bad band of round 2: error %v, want one naming round 2", err)
	}
}

// TestRenderNamesTheRecipe: a run that follows a recipe is named with it
// in the header; without one the header says the config has none.
func TestRenderNamesTheRecipe(t *testing.T) {
	var with, without bytes.Buffer
	if err := Render(&with, Header{Run: "r", Band: Band{0.2, 0.8}, Recipe: "games-30b-a3b"}, sampleRounds(3)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(with.String(), `<dd id="hdr-recipe">games-30b-a3b</dd>`) {
		t.Error("the recipe is not named in the header")
	}
	if err := Render(&without, Header{Run: "r", Band: Band{0.2, 0.8}}, sampleRounds(3)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(without.String(), `<dd id="hdr-recipe" class="unset">not in this run`) {
		t.Error("a run without a recipe does not say so")
	}
}

// TestRenderWarnsOffPolicy: a training run whose rounds were answered by
// another policy than theirs (issue 21: fixed serving with a trainer)
// says so at the top of the page, naming the rounds; the same rounds in a
// run without a trainer, or a training run whose rounds are all on
// policy, get no warning.
func TestRenderWarnsOffPolicy(t *testing.T) {
	render := func(h Header, rounds []RoundSummary) string {
		t.Helper()
		var b bytes.Buffer
		if err := Render(&b, h, rounds); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	h := Header{Run: "r", Band: Band{0.2, 0.8}, Trains: true, Serving: "fixed"}
	rounds := sampleRounds(3)
	if page := render(h, rounds); strings.Contains(page, `id="off-policy"`) {
		t.Error("an on-policy run is warned about")
	}
	rounds[0].OffPolicy, rounds[2].OffPolicy = true, true
	page := render(h, rounds)
	i := strings.Index(page, `<p class="warning" id="off-policy">`)
	if i < 0 {
		t.Fatal("no off-policy warning")
	}
	if j := strings.Index(page, `id="run-header"`); j < i {
		t.Error("the warning is not at the top of the page")
	}
	want := fmt.Sprintf("2 of 3 rounds (rounds %d, %d)", rounds[0].Round, rounds[2].Round)
	if !strings.Contains(page, want) {
		t.Errorf("the warning does not name the rounds (%q): %s", want, page[i:i+300])
	}
	h.Trains = false
	if page := render(h, rounds); strings.Contains(page, `id="off-policy"`) {
		t.Error("a run without a trainer is warned about")
	}
}

// TestRenderEvals: rounds with held-out scores get one more plot and a
// table whose first row is the base checkpoint's scores (Header.BaseEvals)
// and whose other rows are the evaluated rounds only; a score outside
// [0, 1] or NaN, on a round or the base, is refused naming it.
func TestRenderEvals(t *testing.T) {
	rounds := sampleRounds(4)
	rounds[1].Evals = map[string]float64{"reasoning_gym/leg_counting accuracy": 0.25}
	rounds[3].Evals = map[string]float64{"reasoning_gym/leg_counting accuracy": 0.5, "lm_eval/aime exact_match,none": 0.125}
	h := Header{Run: "r", Band: Band{0.2, 0.8}, BaseEvals: map[string]float64{"reasoning_gym/leg_counting accuracy": 0.0625}}
	var b bytes.Buffer
	if err := Render(&b, h, rounds); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if got := strings.Count(page, "<svg "); got != PlotCount+1 {
		t.Errorf("%d plots, want %d", got, PlotCount+1)
	}
	if !strings.Contains(page, TitleEvals) {
		t.Error("no evaluation plot")
	}
	i := strings.Index(page, `<table id="evals">`)
	if i < 0 {
		t.Fatal("no evaluation table")
	}
	table := page[i : i+strings.Index(page[i:], "</table>")]
	want := []string{
		"<th>round</th><th>lm_eval/aime exact_match,none</th><th>reasoning_gym/leg_counting accuracy</th>",
		"<tr><td>0 (base)</td><td>–</td><td>0.062</td></tr>",
		"<tr><td>1</td><td>–</td><td>0.250</td></tr>",
		"<tr><td>3</td><td>0.125</td><td>0.500</td></tr>",
	}
	for _, w := range want {
		if !strings.Contains(table, w) {
			t.Errorf("evaluation table lacks %q:\n%s", w, table)
		}
	}
	if strings.Count(table, "<tr>") != 4 {
		t.Errorf("want a header and 3 rows (base, rounds 1 and 3):\n%s", table)
	}

	var none bytes.Buffer
	if err := Render(&none, Header{Run: "r", Band: Band{0.2, 0.8}}, sampleRounds(4)); err != nil {
		t.Fatal(err)
	}
	if strings.Count(none.String(), "<svg ") != PlotCount || strings.Contains(none.String(), `id="evals"`) {
		t.Error("a run without scores has an evaluation plot or table")
	}

	bad := sampleRounds(2)
	bad[1].Evals = map[string]float64{"x accuracy": 1.5}
	if err := Render(&none, Header{Run: "r", Band: Band{0.2, 0.8}}, bad); err == nil || !strings.Contains(err.Error(), `Evals["x accuracy"] = 1.5 is outside [0, 1]`) {
		t.Errorf("score 1.5: err = %v", err)
	}
	h.BaseEvals = map[string]float64{"y accuracy": math.NaN()}
	if err := Render(&none, h, sampleRounds(2)); err == nil || !strings.Contains(err.Error(), `BaseEvals["y accuracy"] = NaN is outside [0, 1]`) {
		t.Errorf("base score NaN: err = %v", err)
	}
}

// TestRenderNoDataIsNotZero: a run of trainer none behind a server with
// no log-probs (no step metrics, no token ids, no served call): every
// training plot but the zero-variance one, the token-length plot and the
// on_policy plot say "no data" and draw nothing, and their table cells
// are "–", never 0; what was measured (the zero-variance share, an
// unextracted share of exactly 0) is drawn and written as 0.
func TestRenderNoDataIsNotZero(t *testing.T) {
	rounds := sampleRounds(4)
	nan := math.NaN()
	for i := range rounds {
		rounds[i].PolicyCalls = 0
		rounds[i].Training = &Training{Trained: false, AgentGroups: 8, ZeroVarianceGroups: 2, ZeroVarianceShare: 0.25,
			Loss: nan, GradNorm: nan, ClipFraction: nan, KL: nan, TrainedTokens: nan,
			LogprobMismatchMean: nan, LogprobMismatchMax: nan, SamplerLogprobTokens: nan, TISClipFraction: nan}
		rounds[i].Replies.TokenReplies, rounds[i].Replies.TokensMean, rounds[i].Replies.TokensP90 = 0, nan, nan
		rounds[i].Replies.UnextractedShare = 0
	}
	rounds[3].Training = nil // a round without train_metrics
	out := string(render(t, "none", rounds))
	svgs := map[string]string{}
	for _, s := range svgRe.FindAllString(out, -1) {
		id := s[strings.Index(s, `id="`)+4:]
		svgs[id[:strings.Index(id, `"`)]] = s
	}
	for _, id := range []string{"loss", "grad-norm", "clip", "kl", "trained-tokens", "mismatch", "reply-tokens", "on-policy"} {
		s, ok := svgs[id]
		if !ok {
			t.Fatalf("no plot %s", id)
		}
		if !strings.Contains(s, `class="no-data"`) || !strings.Contains(s, ">no data (") {
			t.Errorf("plot %s does not say it has no data", id)
		}
		if strings.Contains(s, `class="marker"`) || strings.Contains(s, `class="series"`) {
			t.Errorf("plot %s draws a value it does not have", id)
		}
	}
	if !strings.Contains(svgs["kl"], "grpo.kl_beta 0") || !strings.Contains(svgs["mismatch"], "server log-prob") {
		t.Error("the KL and mismatch plots do not say why they have no data")
	}
	if got := strings.Count(svgs["zero-variance"], `class="marker"`); got != 3 {
		t.Errorf("zero-variance plot has %d markers, want 3 (round 3 has no train_metrics)", got)
	}
	if got := strings.Count(svgs["cut"], `class="marker" data-series="stepped replies without an action"`); got != 4 {
		t.Errorf("a measured 0 of unextracted actions has %d markers, want 4", got)
	}
	table := func(id string) string {
		i := strings.Index(out, `<table id="`+id+`">`)
		if i < 0 {
			t.Fatalf("no table %s", id)
		}
		return out[i : i+strings.Index(out[i:], "</table>")]
	}
	train := table("training")
	if !strings.Contains(train, "<tr><td>0</td><td>no</td><td>0</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>2/8</td></tr>") {
		t.Errorf("training row of round 0 is not all no data but the groups:\n%s", train)
	}
	if !strings.Contains(train, "<tr><td>3</td><td>no train_metrics</td>") {
		t.Errorf("a round without train_metrics is not named so:\n%s", train)
	}
	replies := table("replies")
	if !strings.Contains(replies, "<td>0</td><td>–</td><td>–</td>") || !strings.Contains(replies, "<td>0.000</td><td>–</td></tr>") {
		t.Errorf("replies table: tokens and on_policy should be –, the unextracted share 0.000:\n%s", replies)
	}
}

// TestRenderRoundsText: the opening sentence is true for each kind of
// run: k > 1 (regeneration rounds named and marked, two populations),
// k = 1 (every round regenerates, nothing marked, no populations),
// design.mode fixed_pool (no regeneration, no regret, no "every k
// rounds"), and a k that is not the same for every round shown (not
// named).
func TestRenderRoundsText(t *testing.T) {
	text := func(h Header, rounds []RoundSummary) string {
		t.Helper()
		out := string(renderWith(t, h, rounds))
		i := strings.Index(out, `<p class="meta" id="rounds-text">`)
		if i < 0 {
			t.Fatal("no rounds text")
		}
		return out[i : i+strings.Index(out[i:], "</p>")]
	}
	h := Header{Run: "r", Band: Band{0.2, 0.8}, RegenerateEvery: 4}
	got := text(h, sampleRounds(8))
	for _, want := range []string{"8 rounds (0 to 7), 2 with regeneration (every 4 rounds), marked by dashed vertical lines.", "drawn per population", "Regret exists on regeneration rounds only"} {
		if !strings.Contains(got, want) {
			t.Errorf("k = 4: %q lacks %q", got, want)
		}
	}
	h.RegenerateEvery = 1
	got = text(h, sampleRoundsK(3, 1))
	if !strings.Contains(got, "3 rounds (0 to 2), every one with regeneration (regenerate_every 1): each designs, plays and labels its own environments") ||
		strings.Contains(got, "dashed") || strings.Contains(got, "population") {
		t.Errorf("k = 1: %q", got)
	}
	fixed := sampleRoundsK(5, 1000)
	fixed[0].Regeneration = false
	h.RegenerateEvery, h.FixedPool = 0, true
	got = text(h, fixed)
	if !strings.Contains(got, "5 rounds (0 to 4), none with regeneration: under design.mode fixed_pool no round designs environments; every round plays the pool imported at round 0") ||
		!strings.Contains(got, "No round has regret") || strings.Contains(got, "every 4") || strings.Contains(got, "dashed") {
		t.Errorf("fixed pool: %q", got)
	}
	h.FixedPool = false
	got = text(h, sampleRounds(8))
	if !strings.Contains(got, "2 with regeneration, marked") {
		t.Errorf("k unknown: %q", got)
	}
	if got := text(h, sampleRounds(1)); !strings.Contains(got, "1 round (0), with regeneration: it designs") {
		t.Errorf("one round: %q", got)
	}
}

// TestRenderMetricsDocAsHTML: the definitions are Markdown rendered as
// HTML (headings with ids prefixed doc-, tables, code), not a raw block;
// raw HTML in them is left out.
func TestRenderMetricsDocAsHTML(t *testing.T) {
	h := testHeader("r")
	h.MetricsDoc = "# Round metrics\n\nWin rate <b>is</b> `win_rate`.\n\n## Report\n\n| name | unit |\n|---|---|\n| `plays` | plays |\n"
	out := string(renderWith(t, h, sampleRounds(2)))
	i := strings.Index(out, `<section class="doc" id="doc-metrics">`)
	if i < 0 {
		t.Fatal("no definitions section")
	}
	doc := out[i:]
	for _, want := range []string{`<h1 id="doc-round-metrics">Round metrics</h1>`, `<h2 id="doc-report">Report</h2>`, "<code>win_rate</code>",
		"<table>", "<td><code>plays</code></td>"} {
		if !strings.Contains(doc, want) {
			t.Errorf("definitions lack %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "<pre>") || strings.Contains(doc, "<b>is</b>") || strings.Contains(doc, "| name |") {
		t.Errorf("definitions are raw Markdown or carry raw HTML:\n%s", doc)
	}
}

func renderWith(t *testing.T, h Header, rounds []RoundSummary) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, h, rounds); err != nil {
		t.Fatalf("Render: %v", err)
	}
	return b.Bytes()
}
