package termtext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é and 日本": "plain text, é and 日本",
		"\x1b[2Kcleared":       `\x1b[2Kcleared`,
		"over\rwrite":          `over\x0dwrite`,
		"tab\there":            `tab\x09here`,
		"c1 \u009b control":    `c1 \x9b control`,
		"line\nbreak":          `line\x0abreak`,
		"bidi \u202eesrever":   `bidi \u202eesrever`,
		"zero\u200bwidth kept": "zero\u200bwidth kept",
	} {
		require.Equal(t, want, Safe(in), "%q", in)
	}
}
