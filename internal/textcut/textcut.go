// Package textcut cuts UTF-8 text to a byte budget without splitting a
// character, so what spade stores (Parquet string columns, error details)
// or prints stays valid UTF-8 (RFC 3629) wherever the input was.
package textcut

import "unicode/utf8"

// Prefix returns the longest prefix of s that is at most n bytes long and
// does not end inside a UTF-8 character: s itself when len(s) <= n, ""
// when n <= 0. Bytes of an invalid sequence count as characters of their
// own.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Suffix returns the longest suffix of s that is at most n bytes long and
// does not begin inside a UTF-8 character: s itself when len(s) <= n, ""
// when n <= 0.
func Suffix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[start:]
}
