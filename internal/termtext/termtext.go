// Package termtext makes text from programs and tables safe to print on a
// terminal.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
)

// Safe escapes the control characters of s (ANSI escape sequences,
// carriage returns, C1 controls; a tab too, which would break aligned
// columns) and the bidirectional-text controls (U+202A-U+202E,
// U+2066-U+2069, which reorder what is displayed) as \xNN or \uNNNN, so
// text from a program or a table (an exception message, an LLM-written
// name) cannot rewrite what a terminal shows, e.g. fake a "VALID" line.
// Machine formats (--json, csv) keep the text as it is.
func Safe(s string) string {
	if strings.IndexFunc(s, unsafeRune) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafeRune(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }
