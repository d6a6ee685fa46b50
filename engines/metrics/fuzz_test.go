package metrics

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTokenize feeds arbitrary (LLM-written, hence untrusted) sources to
// the tokeniser: it must not panic and must only emit lowercase-stable,
// valid UTF-8 terms of at least 2 runes that do not start with a digit.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{
		"class Maze(gym.Env):\n    def reset(self, seed=None):\n        self.grid_size = 5\n",
		"numRooms HTTPServer __init__ x2Y 0x1f 1e6 ünïcödé_Wörd",
		"\xff\xfe invalid \xc3 utf8",
		"", "_", "a_b_c", "İstanbul ǅemal",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks := Tokenize(s)
		for _, tok := range toks {
			if !utf8.ValidString(tok) {
				t.Fatalf("invalid UTF-8 term %q", tok)
			}
			if utf8.RuneCountInString(tok) < 2 {
				t.Fatalf("term %q shorter than 2 runes", tok)
			}
			if strings.ContainsFunc(tok, func(r rune) bool { return !isWordRune(r) }) {
				t.Fatalf("term %q holds a separator", tok)
			}
			if strings.ToLower(tok) != tok {
				t.Fatalf("term %q is not lowercase", tok)
			}
		}
		if again := Tokenize(s); !slices.Equal(toks, again) {
			t.Fatalf("Tokenize not deterministic: %q vs %q", toks, again)
		}
	})
}

// FuzzNormalizeDomain: corpus files carry arbitrary domain labels. The
// mapping must not panic, must return a listed domain, and normalising a
// normalised label must change nothing.
func FuzzNormalizeDomain(f *testing.F) {
	for _, s := range []string{"Computer Science", "cs.AI cs.LG", "physics.chem-ph",
		"biology-medicine", "math.", "..", "q-bio!", "İİ", " , ; ", "hep-th.X"} {
		f.Add(s)
	}
	domains := CoverageDomains()
	f.Fuzz(func(t *testing.T, label string) {
		norm, domain, ok := NormalizeDomain(label)
		if ok != (domain != "") || (ok && !slices.Contains(domains, domain)) {
			t.Fatalf("NormalizeDomain(%q) = %q, %q, %v", label, norm, domain, ok)
		}
		norm2, domain2, _ := NormalizeDomain(norm)
		if norm2 != norm || domain2 != domain {
			t.Fatalf("not idempotent: %q -> (%q, %q) -> (%q, %q)", label, norm, domain, norm2, domain2)
		}
	})
}
