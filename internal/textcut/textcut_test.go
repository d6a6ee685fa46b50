package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"hello", 0, ""},
		{"hello", -1, ""},
		{"aé", 2, "a"}, // é is 2 bytes: not cut in half
		{"aé", 3, "aé"},
		{"日本語", 4, "日"}, // 3-byte characters
		{"日本語", 6, "日本"},
		{"😀x", 3, ""},          // a 4-byte character that does not fit at all
		{"a\xffb", 2, "a\xff"}, // an invalid byte counts as a character of its own
	} {
		require.Equal(t, tc.want, Prefix(tc.s, tc.n), "Prefix(%q, %d)", tc.s, tc.n)
	}
}

func TestSuffix(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "llo"},
		{"hello", 0, ""},
		{"éa", 2, "a"},
		{"éa", 3, "éa"},
		{"日本語", 4, "語"},
		{"x😀", 3, ""},
	} {
		require.Equal(t, tc.want, Suffix(tc.s, tc.n), "Suffix(%q, %d)", tc.s, tc.n)
	}
}

// Every cut of valid text is valid text no longer than the budget, and as
// long as possible: one more byte would split a character or exceed n.
func TestCutsStayValid(t *testing.T) {
	s := strings.Repeat("aé日😀", 5)
	for n := 0; n <= len(s)+1; n++ {
		p, q := Prefix(s, n), Suffix(s, n)
		require.True(t, utf8.ValidString(p) && utf8.ValidString(q), "n=%d", n)
		require.LessOrEqual(t, len(p), max(n, 0))
		require.LessOrEqual(t, len(q), max(n, 0))
		require.True(t, strings.HasPrefix(s, p) && strings.HasSuffix(s, q))
		if n < len(s) {
			require.Greater(t, len(p)+utf8.RuneLen([]rune(s[len(p):])[0]), n, "prefix too short at n=%d", n)
			_, size := utf8.DecodeLastRuneInString(s[:len(s)-len(q)])
			require.Greater(t, len(q)+size, n, "suffix too short at n=%d", n)
		}
	}
}
