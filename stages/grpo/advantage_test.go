package grpo

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestGroupAdvantages(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		rewards []float64
		groups  []string
		eps     float64
		want    []float64 // nil: check only the properties below
		stats   GroupStats
		err     error
		errText string
	}{
		{
			name:    "two samples population std",
			rewards: []float64{0, 1},
			groups:  []string{"e", "e"},
			eps:     0,
			want:    []float64{-1, 1},
			stats:   GroupStats{Samples: 2, Groups: 1, MeanStd: 0.5},
		},
		{
			name:    "eps shrinks",
			rewards: []float64{1, 3},
			groups:  []string{"e", "e"},
			eps:     1,
			want:    []float64{-0.5, 0.5},
			stats:   GroupStats{Samples: 2, Groups: 1, MeanStd: 1},
		},
		{
			name:    "interleaved groups",
			rewards: []float64{1, 10, 3, 12},
			groups:  []string{"a", "b", "a", "b"},
			eps:     0,
			want:    []float64{-1, -1, 1, 1},
			stats:   GroupStats{Samples: 4, Groups: 2, MeanStd: 1},
		},
		{
			name:    "zero variance group is exactly zero and counted",
			rewards: []float64{0.1, 0.1, 0.1, 0, 1},
			groups:  []string{"z", "z", "z", "x", "x"},
			eps:     DefaultEps,
			stats:   GroupStats{Samples: 5, Groups: 2, ZeroVariance: 1, ZeroAdvantageSamples: 3, MeanStd: 0.5},
		},
		{
			name:    "singleton group",
			rewards: []float64{5, 0, 1},
			groups:  []string{"s", "x", "x"},
			eps:     0,
			want:    []float64{0, -1, 1},
			stats:   GroupStats{Samples: 3, Groups: 2, Singletons: 1, ZeroAdvantageSamples: 1, MeanStd: 0.5},
		},
		{
			name:  "empty",
			eps:   DefaultEps,
			want:  []float64{},
			stats: GroupStats{},
		},
		{name: "NaN names the index", rewards: []float64{0, 1, math.NaN()}, groups: []string{"a", "a", "a"}, eps: DefaultEps, err: ErrNonFinite, errText: "sample 2"},
		{name: "Inf names the index", rewards: []float64{-inf, 1}, groups: []string{"a", "a"}, eps: DefaultEps, err: ErrNonFinite, errText: "sample 0"},
		{name: "length mismatch", rewards: []float64{1}, groups: []string{"a", "b"}, eps: DefaultEps, err: ErrShape},
		{name: "negative eps", rewards: []float64{1}, groups: []string{"a"}, eps: -1, err: ErrShape},
		{name: "NaN eps", rewards: []float64{1}, groups: []string{"a"}, eps: math.NaN(), err: ErrShape},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			adv, stats, err := GroupAdvantages(tc.rewards, tc.groups, tc.eps)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				if !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err %q does not name %q", err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(adv) != len(tc.rewards) {
				t.Fatalf("len(adv) = %d, want %d", len(adv), len(tc.rewards))
			}
			for i := range tc.want {
				if !near(adv[i], tc.want[i]) {
					t.Errorf("adv[%d] = %v, want %v", i, adv[i], tc.want[i])
				}
			}
			if stats.Samples != tc.stats.Samples || stats.Groups != tc.stats.Groups || stats.ZeroVariance != tc.stats.ZeroVariance ||
				stats.Singletons != tc.stats.Singletons || stats.ZeroAdvantageSamples != tc.stats.ZeroAdvantageSamples || !near(stats.MeanStd, tc.stats.MeanStd) {
				t.Errorf("stats = %+v, want %+v", stats, tc.stats)
			}
		})
	}
}

func TestGroupAdvantagesZeroVarianceExact(t *testing.T) {
	// 0.1 three times has a floating-point mean != 0.1; the explicit
	// all-equal check must still give exactly 0, not a tiny/eps residue.
	adv, _, err := GroupAdvantages([]float64{0.1, 0.1, 0.1}, []string{"g", "g", "g"}, 1e-12)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range adv {
		if a != 0 {
			t.Errorf("adv[%d] = %v, want exactly 0", i, a)
		}
	}
}

func TestGroupAdvantagesUnequalSizes(t *testing.T) {
	// The brief's check: groups [1,2,3,4], [10,12], [5,6,7] each normalised
	// on their own: per-group mean advantage 0, population std ~1.
	rewards := []float64{1, 10, 5, 2, 12, 6, 3, 7, 4}
	groups := []string{"a", "b", "c", "a", "b", "c", "a", "c", "a"}
	adv, stats, err := GroupAdvantages(rewards, groups, DefaultEps)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Groups != 3 || stats.ZeroVariance != 0 || stats.Singletons != 0 {
		t.Fatalf("stats = %+v", stats)
	}
	for _, g := range []string{"a", "b", "c"} {
		var sum, sq float64
		var n int
		for i := range adv {
			if groups[i] == g {
				sum += adv[i]
				sq += adv[i] * adv[i]
				n++
			}
		}
		if math.Abs(sum/float64(n)) > 1e-12 {
			t.Errorf("group %s: mean advantage %v, want 0", g, sum/float64(n))
		}
		if std := math.Sqrt(sq / float64(n)); math.Abs(std-1) > 1e-5 {
			t.Errorf("group %s: advantage std %v, want ~1", g, std)
		}
	}
}

func TestGroupAdvantagesDeterministic(t *testing.T) {
	// Same inputs, many runs: bitwise identical (no map-order effects).
	var rewards []float64
	var groups []string
	for i := range 200 {
		rewards = append(rewards, math.Sin(float64(i))*3)
		groups = append(groups, string(rune('a'+i%17)))
	}
	first, _, err := GroupAdvantages(rewards, groups, DefaultEps)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _, _ := GroupAdvantages(rewards, groups, DefaultEps)
		for i := range first {
			if math.Float64bits(first[i]) != math.Float64bits(again[i]) {
				t.Fatalf("run differs at %d", i)
			}
		}
	}
}

func TestParseWeightRule(t *testing.T) {
	tests := []struct {
		in   string
		want WeightRule
		bad  bool
	}{
		{in: "ratio", want: WeightRule{Kind: WeightRatio}},
		{in: "none", want: WeightRule{Kind: WeightNone}},
		{in: "fixed:2.5", want: WeightRule{Kind: WeightFixed, Fixed: 2.5}},
		{in: "fixed:0", bad: true},
		{in: "fixed:-1", bad: true},
		{in: "fixed:NaN", bad: true},
		{in: "fixed:+Inf", bad: true},
		{in: "fixed:", bad: true},
		{in: "Ratio", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseWeightRule(tc.in)
			if tc.bad {
				if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "\""+tc.in+"\"") {
					t.Fatalf("err = %v, want ErrShape quoting the input", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			if got.String() != tc.in {
				t.Errorf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestDesignerAdvantages(t *testing.T) {
	rewards := []float64{1, -1, 0.5, 0.5, 0.2}
	skills := []string{"logic", "logic", "spatial", "spatial", "causal"}
	tests := []struct {
		name    string
		rewards []float64
		skills  []string
		opts    DesignerOptions
		want    []float64
		weight  float64
		err     error
		errText string
	}{
		{
			name: "public code: centred, no std, weight none",
			opts: DesignerOptions{},
			want: []float64{1, -1, 0, 0, 0}, weight: 1,
		},
		{
			name: "role std normalisation",
			// centred = [1,-1,0,0,0]; population std = sqrt(2/5)
			opts: DesignerOptions{Norm: DesignerNormStd},
			want: []float64{1 / math.Sqrt(0.4), -1 / math.Sqrt(0.4), 0, 0, 0}, weight: 1,
		},
		{
			// Skills whose rewards are all equal centre to exactly 0: the
			// mean's rounding (0.1 - mean(0.1,0.1,0.1) = -1.4e-17) used to
			// survive, and with eps 0 the role std of those leftovers
			// (~5e-17) scaled them to O(1) advantages.
			name:    "equal rewards centre to exactly 0, std norm, eps 0",
			rewards: []float64{0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7},
			skills:  []string{"a", "a", "a", "b", "b", "b", "b", "b", "b", "b"},
			opts:    DesignerOptions{Norm: DesignerNormStd},
			want:    []float64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, weight: 1,
		},
		{
			name: "fixed weight",
			opts: DesignerOptions{Weight: WeightRule{Kind: WeightFixed, Fixed: 3}},
			want: []float64{1, -1, 0, 0, 0}, weight: 3,
		},
		{
			name: "ratio weight under cap",
			// 20 agent / 5 designer samples x interval 4 = 16
			opts: DesignerOptions{Weight: WeightRule{Kind: WeightRatio}, AgentSamples: 20, RegenerationInterval: 4},
			want: []float64{1, -1, 0, 0, 0}, weight: 16,
		},
		{
			name:   "ratio weight capped at 50",
			opts:   DesignerOptions{Weight: WeightRule{Kind: WeightRatio}, AgentSamples: 384, RegenerationInterval: 4},
			want:   []float64{1, -1, 0, 0, 0},
			weight: 50,
		},
		{
			name:   "ratio weight custom cap",
			opts:   DesignerOptions{Weight: WeightRule{Kind: WeightRatio}, AgentSamples: 384, RegenerationInterval: 4, WeightCap: 10},
			want:   []float64{1, -1, 0, 0, 0},
			weight: 10,
		},
		{
			name:    "all equal within skills under std norm gives zeros",
			rewards: []float64{0.3, 0.3, -0.2, -0.2},
			skills:  []string{"a", "a", "b", "b"},
			opts:    DesignerOptions{Norm: DesignerNormStd, Eps: DefaultEps},
			want:    []float64{0, 0, 0, 0}, weight: 1,
		},
		{name: "NaN names index", rewards: []float64{0, math.NaN()}, skills: []string{"a", "a"}, err: ErrNonFinite, errText: "sample 1"},
		{name: "Inf names index", rewards: []float64{math.Inf(-1)}, skills: []string{"a"}, err: ErrNonFinite, errText: "sample 0"},
		{name: "length mismatch", rewards: []float64{0}, skills: []string{}, err: ErrShape},
		{name: "bad norm", opts: DesignerOptions{Norm: "zscore"}, err: ErrShape, errText: "zscore"},
		{name: "ratio without interval", opts: DesignerOptions{Weight: WeightRule{Kind: WeightRatio}, AgentSamples: 10}, err: ErrShape, errText: "regeneration interval"},
		{name: "fixed zero", opts: DesignerOptions{Weight: WeightRule{Kind: WeightFixed}}, err: ErrShape},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, s := tc.rewards, tc.skills
			if r == nil && s == nil {
				r, s = rewards, skills
			}
			adv, stats, err := DesignerAdvantages(r, s, tc.opts)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v naming %q", err, tc.err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				if !near(adv[i], tc.want[i]) {
					t.Errorf("adv[%d] = %v, want %v", i, adv[i], tc.want[i])
				}
			}
			if stats.Weight != tc.weight {
				t.Errorf("weight = %v, want %v", stats.Weight, tc.weight)
			}
			for i := 1; i < len(stats.Skills); i++ {
				if stats.Skills[i-1].Skill >= stats.Skills[i].Skill {
					t.Errorf("skills not sorted: %+v", stats.Skills)
				}
			}
		})
	}
}

func TestDesignerSkillMeans(t *testing.T) {
	_, stats, err := DesignerAdvantages([]float64{1, 0, -1, 0.5}, []string{"z", "a", "z", "a"}, DesignerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []SkillMean{{Skill: "a", Samples: 2, Mean: 0.25}, {Skill: "z", Samples: 2, Mean: 0}}
	if len(stats.Skills) != 2 || stats.Skills[0] != want[0] || stats.Skills[1] != want[1] {
		t.Fatalf("skills = %+v, want %+v", stats.Skills, want)
	}
}
