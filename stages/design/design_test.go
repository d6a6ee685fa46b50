package design

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/stages/design/prompt"
)

// TestDocExcerptChars pins the unit of DocExcerptChars: code points, not
// bytes. A document of exactly DocExcerptChars two-byte characters passes
// uncut; one more character cuts it to at most DocExcerptChars code points
// plus the " [...]" marker.
func TestDocExcerptChars(t *testing.T) {
	full := strings.Repeat("é", DocExcerptChars)
	require.Equal(t, full, prompt.Excerpt(full, DocExcerptChars), "2*DocExcerptChars bytes but DocExcerptChars code points: not cut")

	cut := prompt.Excerpt(full+"é", DocExcerptChars)
	require.True(t, strings.HasSuffix(cut, " [...]"))
	require.Equal(t, DocExcerptChars, utf8.RuneCountInString(strings.TrimSuffix(cut, " [...]")))
	require.True(t, utf8.ValidString(cut))
}
