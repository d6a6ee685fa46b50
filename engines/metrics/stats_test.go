package metrics

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"one value", []float64{0.5}, Summary{N: 1, Mean: 0.5, Min: 0.5, Max: 0.5, P10: 0.5, P50: 0.5, P90: 0.5}},
		// h = 10·q over 0..10: quantiles fall exactly on ranks.
		{"eleven ranks", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, Summary{N: 11, Mean: 5, Min: 0, Max: 10, P10: 1, P50: 5, P90: 9}},
		// h = 3·q: P10 = 0.3 of the way from 1 to 2, P50 between 2 and 3.
		{"interpolated", []float64{4, 1, 3, 2}, Summary{N: 4, Mean: 2.5, Min: 1, Max: 4, P10: 1.3, P50: 2.5, P90: 3.7}},
		{"negative regret", []float64{-0.5, 0.25, 0.25}, Summary{N: 3, Mean: 0, Min: -0.5, Max: 0.25, P10: -0.35, P50: 0.25, P90: 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Summarize(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			g := []float64{got.Mean, got.Min, got.Max, got.P10, got.P50, got.P90}
			w := []float64{tt.want.Mean, tt.want.Min, tt.want.Max, tt.want.P10, tt.want.P50, tt.want.P90}
			for i := range g {
				if math.Abs(g[i]-w[i]) > 1e-12 {
					t.Fatalf("Summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
				}
			}
			if got.N != tt.want.N {
				t.Fatalf("N = %d, want %d", got.N, tt.want.N)
			}
		})
	}
}

func TestSummarizeOrderIndependent(t *testing.T) {
	a := []float64{0.1, 0.7, 0.2, 1e-17, 0.3, 0.9}
	b := []float64{0.9, 0.3, 1e-17, 0.2, 0.7, 0.1}
	sa, _ := Summarize(a)
	sb, _ := Summarize(b)
	if sa != sb {
		t.Fatalf("order changed the summary: %+v vs %+v", sa, sb)
	}
	if a[0] != 0.1 {
		t.Fatal("Summarize reordered its input")
	}
}

func TestSummarizeErrors(t *testing.T) {
	if _, err := Summarize(nil); !errors.Is(err, ErrEmpty) {
		t.Fatalf("empty: %v, want ErrEmpty", err)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := Summarize([]float64{1, bad})
		if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "value 1") {
			t.Fatalf("%v: error %v, want ErrNonFinite naming value 1", bad, err)
		}
	}
}

func TestRewardGranularity(t *testing.T) {
	tests := []struct {
		name  string
		plays [][]float64
		want  int
	}{
		{"no plays", nil, 0},
		{"plays without steps", [][]float64{{}, {}}, 0},
		{"binary win/lose", [][]float64{{0, 0, 1}, {0, 0, 0}}, 2},
		{"always zero", [][]float64{{0, 0}, {0}}, 1},
		{"partial credit", [][]float64{{0.25, 0.5}, {0.75, 1}, {0.5}}, 4},
		{"float noise is one level", [][]float64{{0.1 + 0.2}, {0.3}, {0.3000000001}}, 1},
		{"signed zero is one level", [][]float64{{math.Copysign(0, -1)}, {0}, {-1e-9}}, 1},
		{"resolution boundary", [][]float64{{0}, {2e-6}, {-2e-6}}, 3},
		{"negative penalties", [][]float64{{-1, -0.1}, {-1}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewardGranularity(tt.plays)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("RewardGranularity(%v) = %d, want %d", tt.plays, got, tt.want)
			}
		})
	}
	_, err := RewardGranularity([][]float64{{0}, {1, math.NaN()}})
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "play 1 step 1") {
		t.Fatalf("NaN reward: error %v, want ErrNonFinite naming play 1 step 1", err)
	}
}

func TestLearnableFraction(t *testing.T) {
	tests := []struct {
		name     string
		rates    []float64
		lo, hi   float64
		want     float64
		wantErr  string
		sentinel error
	}{
		{name: "bounds are inclusive", rates: []float64{0.2, 0.8, 0.5, 0.1, 0.9}, lo: 0.2, hi: 0.8, want: 0.6},
		{name: "rounded bound counts", rates: []float64{0.1 + 0.1, 3.0 / 15, 0.7 + 0.1}, lo: 0.2, hi: 0.8, want: 1},
		{name: "just outside", rates: []float64{0.2 - 1e-6, 0.8 + 1e-6}, lo: 0.2, hi: 0.8, want: 0},
		{name: "all unsolved", rates: []float64{0, 0, 0}, lo: 0.2, hi: 0.8, want: 0},
		{name: "point band", rates: []float64{0.5, 0.5, 0.25, 1}, lo: 0.5, hi: 0.5, want: 0.5},
		{name: "empty", lo: 0.2, hi: 0.8, sentinel: ErrEmpty},
		{name: "inverted band", rates: []float64{0.5}, lo: 0.8, hi: 0.2, wantErr: "band [0.8, 0.2]"},
		{name: "band outside unit interval", rates: []float64{0.5}, lo: -0.1, hi: 0.8, wantErr: "band [-0.1, 0.8]"},
		{name: "NaN band", rates: []float64{0.5}, lo: math.NaN(), hi: 0.8, wantErr: "band [NaN, 0.8]"},
		{name: "NaN win rate", rates: []float64{0.5, math.NaN()}, lo: 0.2, hi: 0.8, wantErr: "win rate 1", sentinel: ErrNonFinite},
		{name: "win rate above 1", rates: []float64{1.5}, lo: 0.2, hi: 0.8, wantErr: "win rate 0: value 1.5 outside [0, 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LearnableFraction(tt.rates, tt.lo, tt.hi)
			if tt.wantErr != "" || tt.sentinel != nil {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
					t.Fatalf("error %v is not %v", err, tt.sentinel)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("LearnableFraction = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPerSkillWinRate(t *testing.T) {
	got, err := PerSkillWinRate(
		[]string{"spatial", "logic", "spatial", "planning", "logic"},
		[]float64{0.5, 1, 0.25, 0, 0.5})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"spatial": 0.375, "logic": 0.75, "planning": 0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PerSkillWinRate = %v, want %v", got, want)
	}
	if keys := SortedKeys(got); !reflect.DeepEqual(keys, []string{"logic", "planning", "spatial"}) {
		t.Fatalf("SortedKeys = %v", keys)
	}
	empty, err := PerSkillWinRate(nil, nil)
	if err != nil || len(empty) != 0 {
		t.Fatalf("no environments: %v, %v; want empty map", empty, err)
	}
	for _, tc := range []struct {
		name   string
		skills []string
		rates  []float64
		want   string
	}{
		{"length mismatch", []string{"a"}, []float64{0.1, 0.2}, "1 skills but 2 win rates"},
		{"empty skill", []string{"a", ""}, []float64{0.1, 0.2}, "environment 1 has an empty skill"},
		{"out of range", []string{"a", "b"}, []float64{0.1, -0.2}, `environment 1 (skill "b"): value -0.2 outside [0, 1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PerSkillWinRate(tc.skills, tc.rates)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
