package datasets

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrBadFieldPath is wrapped by ParseFieldPath for a path that does not
// follow the field-path grammar (see FieldPath).
var ErrBadFieldPath = errors.New("bad field path")

// FieldPath addresses a value inside one decoded row (a JSON object of a
// JSONL line, or a Parquet row reconstructed as nested maps and lists).
//
// Grammar: segments separated by '.'; a segment is a key optionally
// followed by selectors, "[]" (map over every element of a list) or "[N]"
// (element N of a list, 0-based). Inside a key, '\' escapes the next
// character so keys holding '.', '[', ']' or '\' stay addressable.
// Examples: "paper_id", "metadata.title", "body_text[].text",
// "authors[0].name", "a\.b" (the single key "a.b").
type FieldPath struct {
	raw   string
	steps []pathStep
}

// pathStep is one navigation step: a key lookup, or a list selector.
type pathStep struct {
	key   string
	list  bool // step is a list selector rather than a key
	all   bool // "[]": every element
	index int  // "[N]": one element
}

// ParseFieldPath parses s per the FieldPath grammar. It returns an error
// wrapping ErrBadFieldPath that names the byte offset of the first problem
// (empty path, empty key, unterminated or malformed selector, dangling '\').
func ParseFieldPath(s string) (FieldPath, error) {
	if s == "" {
		return FieldPath{}, fmt.Errorf("%w: empty path", ErrBadFieldPath)
	}
	var steps []pathStep
	i := 0
	for {
		// One key, up to '.', '[' or the end.
		var key strings.Builder
		start := i
		for i < len(s) && s[i] != '.' && s[i] != '[' {
			if s[i] == ']' {
				return FieldPath{}, fmt.Errorf("%w: %q: unexpected ']' at offset %d", ErrBadFieldPath, s, i)
			}
			if s[i] == '\\' {
				if i+1 >= len(s) {
					return FieldPath{}, fmt.Errorf("%w: %q: dangling '\\' at offset %d", ErrBadFieldPath, s, i)
				}
				i++
			}
			key.WriteByte(s[i])
			i++
		}
		if i == start {
			return FieldPath{}, fmt.Errorf("%w: %q: empty key at offset %d", ErrBadFieldPath, s, i)
		}
		steps = append(steps, pathStep{key: key.String()})
		// Selectors after the key.
		for i < len(s) && s[i] == '[' {
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return FieldPath{}, fmt.Errorf("%w: %q: unterminated '[' at offset %d", ErrBadFieldPath, s, i)
			}
			inner := s[i+1 : i+end]
			if inner == "" {
				steps = append(steps, pathStep{list: true, all: true})
			} else {
				n, err := strconv.Atoi(inner)
				if err != nil || n < 0 || strings.TrimLeft(inner, "0123456789") != "" {
					return FieldPath{}, fmt.Errorf("%w: %q: selector [%s] at offset %d is neither [] nor [N]", ErrBadFieldPath, s, inner, i)
				}
				steps = append(steps, pathStep{list: true, index: n})
			}
			i += end + 1
		}
		if i == len(s) {
			break
		}
		if s[i] != '.' {
			return FieldPath{}, fmt.Errorf("%w: %q: expected '.' or '[' at offset %d", ErrBadFieldPath, s, i)
		}
		i++
		if i == len(s) {
			return FieldPath{}, fmt.Errorf("%w: %q: trailing '.'", ErrBadFieldPath, s)
		}
	}
	return FieldPath{raw: s, steps: steps}, nil
}

// MustParseFieldPath is ParseFieldPath for paths fixed in code; it panics
// on a malformed path.
func MustParseFieldPath(s string) FieldPath {
	p, err := ParseFieldPath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the path in canonical form: ParseFieldPath(p.String())
// yields an equal path.
func (p FieldPath) String() string {
	var b strings.Builder
	for i, st := range p.steps {
		if st.list {
			if st.all {
				b.WriteString("[]")
			} else {
				b.WriteString("[" + strconv.Itoa(st.index) + "]")
			}
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		for j := 0; j < len(st.key); j++ {
			switch c := st.key[j]; c {
			case '.', '[', ']', '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

// IsZero reports whether p is the zero FieldPath (no path configured).
func (p FieldPath) IsZero() bool { return len(p.steps) == 0 }

// errNotText marks a path that reached a value that is not text (an
// object); such a row is skipped with the error as reason.
var errNotText = errors.New("value is an object, not text")

// maxNumberExponent bounds the exponent of a JSON number rendered in
// decimal, so that a literal such as 1e999999999 cannot ask for a
// billion zeros.
const maxNumberExponent = 1000

// decimalString renders the JSON number literal lit as its exact value in
// plain decimal notation: no exponent, no '+', no leading zeros, no
// trailing zeros after the point and no point when the value is an
// integer, "-" only for a value below zero. So 1e20 gives
// "100000000000000000000", 7.0 and 0.7e1 give "7", 2.50e-3 gives "0.0025"
// and -0 gives "0". A nonzero value whose exponent is beyond
// ±maxNumberExponent is an error.
func decimalString(lit string) (string, error) {
	s := strings.TrimPrefix(lit, "-")
	neg := len(s) < len(lit)
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if intPart == "" || strings.Trim(digits, "0123456789") != "" {
		return "", fmt.Errorf("number %q is not a JSON number", lit)
	}
	trimmed := strings.TrimLeft(digits, "0")
	if trimmed == "" {
		return "0", nil
	}
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(expPart)
		if err != nil || e > maxNumberExponent || e < -maxNumberExponent {
			return "", fmt.Errorf("number %s has an exponent beyond ±%d, too large to write in decimal", lit, maxNumberExponent)
		}
		exp = e
	}
	// The value is 0.digits x 10^point.
	point := len(intPart) + exp - (len(digits) - len(trimmed))
	digits = strings.TrimRight(trimmed, "0")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case point <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
	case point >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-len(digits)))
	default:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	}
	return b.String(), nil
}

// floatDecimal renders f in plain decimal notation with the fewest digits
// that read back as the same float of the given bit size (no exponent);
// -0 gives "0". NaN and the infinities have no decimal form and are an
// error.
func floatDecimal(f float64, bitSize int) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("number %v has no decimal form", f)
	}
	if f == 0 {
		return "0", nil
	}
	return strconv.FormatFloat(f, 'f', -1, bitSize), nil
}

// Extract walks p through v and returns the text of every value it
// reaches, in document order. found reports whether the path resolved
// structurally on this row (every key existed and was not null), even if
// it produced no values (an empty list under "[]"). Leaves convert as:
// string as is, json.Number and other numbers in plain decimal notation
// (see decimalString and floatDecimal), bool as "true"/"false", []byte as
// its bytes; a list at the end of a path is flattened; null counts as
// missing. An object at the end of the path is an error wrapping
// errNotText; so is a number that cannot be written in decimal (NaN, an
// infinity, an exponent beyond ±1000 such as 1e5000).
func (p FieldPath) Extract(v any) (vals []string, found bool, err error) {
	return extract(v, p.steps, nil)
}

func extract(v any, steps []pathStep, out []string) ([]string, bool, error) {
	if v == nil {
		return out, false, nil
	}
	if len(steps) == 0 {
		return leafValues(v, out)
	}
	st := steps[0]
	if !st.list {
		m, ok := v.(map[string]any)
		if !ok {
			return out, false, nil
		}
		child, ok := m[st.key]
		if !ok {
			return out, false, nil
		}
		return extract(child, steps[1:], out)
	}
	list, ok := asList(v)
	if !ok {
		return out, false, nil
	}
	if !st.all {
		if st.index >= len(list) {
			return out, false, nil
		}
		return extract(list[st.index], steps[1:], out)
	}
	found := false
	for _, el := range list {
		var f bool
		var err error
		out, f, err = extract(el, steps[1:], out)
		if err != nil {
			return out, true, err
		}
		found = found || f
	}
	// An empty list still proves the path exists on this row.
	return out, found || len(list) == 0, nil
}

// asList accepts the list shapes decoders produce: []any from JSON, and
// the LIST wrapper {"list": [{"element": x}, ...]} that Parquet's
// three-level list encoding reconstructs to.
func asList(v any) ([]any, bool) {
	switch t := v.(type) {
	case []any:
		return t, true
	case []string:
		out := make([]any, len(t))
		for i, s := range t {
			out[i] = s
		}
		return out, true
	case map[string]any:
		inner, ok := t["list"]
		if !ok || len(t) != 1 {
			return nil, false
		}
		items, ok := inner.([]any)
		if !ok {
			return nil, false
		}
		out := make([]any, 0, len(items))
		for _, it := range items {
			if m, ok := it.(map[string]any); ok && len(m) == 1 {
				if e, ok := m["element"]; ok {
					out = append(out, e)
					continue
				}
				if e, ok := m["item"]; ok {
					out = append(out, e)
					continue
				}
			}
			out = append(out, it)
		}
		return out, true
	}
	return nil, false
}

func leafValues(v any, out []string) ([]string, bool, error) {
	switch t := v.(type) {
	case string:
		return append(out, t), true, nil
	case []byte:
		return append(out, string(t)), true, nil
	case json.Number:
		s, err := decimalString(string(t))
		if err != nil {
			return out, true, err
		}
		return append(out, s), true, nil
	case bool:
		return append(out, strconv.FormatBool(t)), true, nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return append(out, fmt.Sprint(t)), true, nil
	case float32:
		s, err := floatDecimal(float64(t), 32)
		if err != nil {
			return out, true, err
		}
		return append(out, s), true, nil
	case float64:
		s, err := floatDecimal(t, 64)
		if err != nil {
			return out, true, err
		}
		return append(out, s), true, nil
	}
	if list, ok := asList(v); ok {
		found := len(list) == 0
		for _, el := range list {
			if el == nil {
				continue
			}
			var err error
			out, _, err = leafValues(el, out)
			if err != nil {
				return out, true, err
			}
			found = true
		}
		return out, found || len(list) > 0, nil
	}
	return out, true, errNotText
}
