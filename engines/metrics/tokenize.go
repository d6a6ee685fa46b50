package metrics

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenize splits an environment's source (Python code, docstrings,
// comments, prompts) into the terms that TF-IDF counts.
//
// Rules, in order:
//  1. A raw token is a maximal run of Unicode letters, digits and '_'
//     (a Python identifier, keyword or word of prose).
//  2. Raw tokens that start with a digit are numeric literals (42, 1e6,
//     0x1f) and are dropped: numbers vary between otherwise identical
//     environments (grid sizes, seeds) and would inflate diversity.
//  3. The raw token, lowercased and stripped of leading and trailing '_',
//     is emitted if it is at least 2 runes long.
//  4. If the raw token is compound (snake_case or camelCase), each part is
//     emitted too, lowercased, if at least 2 runes long and not starting
//     with a digit, so "num_rooms" and "numRooms" share the terms "num"
//     and "rooms" although their whole tokens differ.
//
// The result is in source order, possibly with repeats; nil for text with
// no terms. Invalid UTF-8 bytes act as separators.
func Tokenize(text string) []string {
	var out []string
	start := -1
	for i := 0; i <= len(text); {
		r, size := rune(-1), 1
		if i < len(text) {
			r, size = utf8.DecodeRuneInString(text[i:])
			if r == utf8.RuneError && size <= 1 {
				r = -1
			}
		}
		if r >= 0 && isWordRune(r) {
			if start < 0 {
				start = i
			}
		} else if start >= 0 {
			out = appendTerms(out, text[start:i])
			start = -1
		}
		if i == len(text) {
			break
		}
		i += size
	}
	return out
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

func appendTerms(out []string, raw string) []string {
	first, _ := utf8.DecodeRuneInString(raw)
	if unicode.IsDigit(first) {
		return out
	}
	whole := strings.ToLower(strings.Trim(raw, "_"))
	if utf8.RuneCountInString(whole) < 2 {
		// A lone letter (i, x, _) carries no topic; its parts are shorter still.
		return out
	}
	out = append(out, whole)
	parts := splitCompound(raw)
	if len(parts) < 2 {
		return out
	}
	for _, p := range parts {
		pf, _ := utf8.DecodeRuneInString(p)
		if utf8.RuneCountInString(p) >= 2 && !unicode.IsDigit(pf) {
			out = append(out, strings.ToLower(p))
		}
	}
	return out
}

// splitCompound splits an identifier at '_' and at lower→upper case
// changes ("maxStepCount" → max, Step, Count; "HTTPServer" → HTTP, Server).
func splitCompound(raw string) []string {
	var parts []string
	for _, seg := range strings.Split(raw, "_") {
		if seg == "" {
			continue
		}
		rs := []rune(seg)
		begin := 0
		for j := 1; j < len(rs); j++ {
			lowerToUpper := unicode.IsUpper(rs[j]) && !unicode.IsUpper(rs[j-1])
			// "HTTPServer": split before 'S' because the next rune is lower.
			acronymEnd := unicode.IsUpper(rs[j]) && unicode.IsUpper(rs[j-1]) &&
				j+1 < len(rs) && unicode.IsLower(rs[j+1])
			if lowerToUpper || acronymEnd {
				parts = append(parts, string(rs[begin:j]))
				begin = j
			}
		}
		parts = append(parts, string(rs[begin:]))
	}
	return parts
}
