package metrics

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// word returns a distinct lowercase identifier for i, made of letters only
// so Tokenize keeps it whole.
func word(prefix string, i int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for {
		b.WriteByte(byte('a' + i%26))
		i /= 26
		if i == 0 {
			break
		}
	}
	return b.String()
}

// synthSource renders a Python-like environment of about size bytes:
// shared Gymnasium boilerplate, a family vocabulary (families share
// structure) and a few per-environment identifiers.
func synthSource(rng *rand.Rand, family, id, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "class Env%d:\n    def reset(self, seed=None):\n        self.state = {}\n        return obs, info\n", id)
	fmt.Fprintf(&b, "    def step(self, action):\n        reward = 0.0\n        terminated = False\n        truncated = False\n")
	for b.Len() < size {
		var w string
		switch r := rng.IntN(10); {
		case r < 6:
			w = word("fam", family*40+rng.IntN(40))
		case r < 8:
			w = word("tok", rng.IntN(3000))
		default:
			w = word("uniq", id*7+rng.IntN(7))
		}
		fmt.Fprintf(&b, "        self.%s = %d  # %s\n", w, rng.IntN(100), word("cmt", rng.IntN(500)))
	}
	return b.String()
}

func TestVendi(t *testing.T) {
	src := "class Maze:\n    def reset(self, seed):\n        self.grid_size = 5\n    def step(self, action):\n        return obs, reward, terminated, truncated, info\n"
	repeat := func(s string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	disjoint := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s %s %s", word("alpha", i), word("beta", i), word("gamma", i))
		}
		return out
	}
	tests := []struct {
		name  string
		texts []string
		dim   int
		want  float64
	}{
		{"single text", []string{src}, 128, 1},
		{"two identical", repeat(src, 2), 128, 1},
		{"fifty identical", repeat(src, 50), 128, 1},
		{"identical after dropping numbers and case", []string{"Grid size 5", "grid SIZE 17", "GRID size 0x1f"}, 128, 1},
		{"empty texts are identical to each other", []string{"", "123 456", "+-*/"}, 128, 1},
		{"two disjoint", disjoint(2), 128, 2},
		{"hundred disjoint", disjoint(100), 128, 100},
		{"disjoint capped by LSA dimension", disjoint(10), 4, 4},
		{"empty vs non-empty", []string{"", "maze runner"}, 128, 2},
		{"two pairs", []string{"red apple", "red apple", "blue whale", "blue whale"}, 128, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Vendi(tt.texts, tt.dim)
			if err != nil {
				t.Fatalf("Vendi: %v", err)
			}
			if math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Vendi = %.12f, want %v", got, tt.want)
			}
			perN, err := VendiPerN(tt.texts, tt.dim)
			if err != nil {
				t.Fatalf("VendiPerN: %v", err)
			}
			if n := float64(len(tt.texts)); math.Abs(perN-tt.want/n) > 1e-9 || perN < 1/n-1e-12 || perN > 1+1e-12 {
				t.Fatalf("VendiPerN = %v, want %v in [1/n, 1]", perN, tt.want/n)
			}
		})
	}
}

func TestVendiErrors(t *testing.T) {
	if _, err := Vendi(nil, 128); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Vendi(nil) error = %v, want ErrEmpty", err)
	}
	if _, err := VendiPerN([]string{}, 128); !errors.Is(err, ErrEmpty) {
		t.Fatalf("VendiPerN(empty) error = %v, want ErrEmpty", err)
	}
	if _, err := Vendi([]string{"a b", "c d"}, 0); err == nil || !strings.Contains(err.Error(), "LSA dimension 0") {
		t.Fatalf("Vendi(dim 0) error = %v, want one naming the LSA dimension", err)
	}
}

// TestVendiMonotonic replaces identical copies with distinct texts one at a
// time; each replacement must raise the score.
func TestVendiMonotonic(t *testing.T) {
	const n = 12
	texts := make([]string, n)
	for i := range texts {
		texts[i] = "shared words only here"
	}
	prev := 0.0
	for i := 0; i < n; i++ {
		if i > 0 {
			texts[i-1] = word("topic", i) + " " + word("other", i)
		}
		got, err := Vendi(texts, DefaultLSADim)
		if err != nil {
			t.Fatal(err)
		}
		if got <= prev {
			t.Fatalf("after %d distinct texts: Vendi = %v, not above %v", i, got, prev)
		}
		prev = got
	}
	if math.Abs(prev-n) > 1e-9 {
		t.Fatalf("all distinct: Vendi = %v, want %d", prev, n)
	}
}

// TestVendiPartialOverlap: texts sharing some terms score strictly between
// the identical and the disjoint case, and more overlap scores lower.
func TestVendiPartialOverlap(t *testing.T) {
	mk := func(shared int) []string {
		out := make([]string, 6)
		for i := range out {
			var ws []string
			for j := 0; j < shared; j++ {
				ws = append(ws, word("common", j))
			}
			for j := 0; j < 10-shared; j++ {
				ws = append(ws, word(fmt.Sprintf("own%c", 'a'+i), j))
			}
			out[i] = strings.Join(ws, " ")
		}
		return out
	}
	prev := 7.0
	for shared := 1; shared <= 9; shared += 2 {
		got, err := Vendi(mk(shared), DefaultLSADim)
		if err != nil {
			t.Fatal(err)
		}
		if got <= 1 || got >= 6 || got >= prev {
			t.Fatalf("shared %d/10 terms: Vendi = %v, want in (1, 6) and below %v", shared, got, prev)
		}
		prev = got
	}
}

func TestVendiDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	texts := make([]string, 400)
	for i := range texts {
		texts[i] = synthSource(rng, i%9, i, 1500)
	}
	first, err := Vendi(texts, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		again, err := Vendi(texts, 32)
		if err != nil {
			t.Fatal(err)
		}
		if again != first {
			t.Fatalf("run %d: Vendi = %v, first run %v", i+2, again, first)
		}
	}
}

// TestVendiRandomizedMatchesExact runs both SVD paths on inputs where both
// are feasible and requires them to agree closely, for both orientations
// (more terms than texts, and more texts than terms).
func TestVendiRandomizedMatchesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	wide := make([]string, 300) // V ≫ n
	for i := range wide {
		wide[i] = synthSource(rng, i%12, i, 1200)
	}
	tall := make([]string, 600) // n > V: words from a 200-term vocabulary
	for i := range tall {
		var ws []string
		for j := 0; j < 30; j++ {
			ws = append(ws, word("v", (i%15)*10+rng.IntN(12)+rng.IntN(60)))
		}
		tall[i] = strings.Join(ws, " ")
	}
	exact := defaultVendiOptions
	exact.exactMax = 1 << 30
	randomized := defaultVendiOptions
	randomized.exactMax = 0
	for _, tc := range []struct {
		name  string
		texts []string
		dim   int
	}{{"wide", wide, 24}, {"tall", tall, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := vendi(tc.texts, tc.dim, exact)
			if err != nil {
				t.Fatal(err)
			}
			got, err := vendi(tc.texts, tc.dim, randomized)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("exact %.6f randomized %.6f", want, got)
			if math.Abs(got-want) > 2e-3*want {
				t.Fatalf("randomized Vendi = %v, exact %v", got, want)
			}
		})
	}
}

func largeCorpus(n int) []string {
	rng := rand.New(rand.NewPCG(7, 8))
	texts := make([]string, n)
	for i := range texts {
		texts[i] = synthSource(rng, i%60, i, 3000)
	}
	return texts
}

// TestVendiLarge is the scale the pipeline meets: 2,400 sources of ~3 KB
// (100 regenerations of 24). It guards against an n×n path sneaking back.
func TestVendiLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large input")
	}
	texts := largeCorpus(2400)
	got, err := VendiPerN(texts, DefaultLSADim)
	if err != nil {
		t.Fatal(err)
	}
	// 60 families plus per-text identifiers: well above one family's worth
	// and below one per text.
	if got <= 1.0/60 || got >= 1 {
		t.Fatalf("VendiPerN = %v, want in (1/60, 1)", got)
	}
	t.Logf("VendiPerN(2400 texts) = %.4f", got)
}

func BenchmarkVendi2400(b *testing.B) {
	texts := largeCorpus(2400)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Vendi(texts, DefaultLSADim); err != nil {
			b.Fatal(err)
		}
	}
}

func TestVendiOfEmbeddings(t *testing.T) {
	// Orthogonal rows: n distinct items. Identical rows: one. Scale does
	// not matter (rows are normalised).
	s, err := VendiOfEmbeddings([][]float64{{1, 0, 0}, {0, 2, 0}, {0, 0, 3}})
	require.NoError(t, err)
	require.InDelta(t, 3, s, 1e-12)
	s, err = VendiOfEmbeddings([][]float64{{1, 1}, {2, 2}, {3, 3}, {0.5, 0.5}})
	require.NoError(t, err)
	require.InDelta(t, 1, s, 1e-12)
	// Two identical and one orthogonal: eigenvalues 2/3, 1/3.
	s, err = VendiOfEmbeddings([][]float64{{1, 0}, {1, 0}, {0, 1}})
	require.NoError(t, err)
	require.InDelta(t, math.Exp(-(2.0/3*math.Log(2.0/3) + 1.0/3*math.Log(1.0/3))), s, 1e-12)
	_, err = VendiOfEmbeddings(nil)
	require.ErrorIs(t, err, ErrEmpty)
	_, err = VendiOfEmbeddings([][]float64{{1, 0}, {1}})
	require.ErrorContains(t, err, "row 1 has 1 values")
	_, err = VendiOfEmbeddings([][]float64{{1, 0}, {math.NaN(), 0}})
	require.ErrorIs(t, err, ErrNonFinite)
	_, err = VendiOfEmbeddings([][]float64{{0, 0}, {0, 0}})
	require.ErrorContains(t, err, "zero")
}
