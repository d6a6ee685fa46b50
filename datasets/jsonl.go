package datasets

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

var gzipMagic = []byte{0x1f, 0x8b}

func (im *importer) importJSONLFile(ctx context.Context, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("import %s: %w", p, err)
	}
	defer f.Close()
	im.rep.Files++
	return im.importJSONL(ctx, p, f, strings.HasSuffix(strings.ToLower(p), ".gz"))
}

// importJSONL reads one JSONL stream; name labels errors and issues. A
// stream that starts with the gzip magic is decompressed whatever its
// name; wantGzip makes a missing magic an error (a *.gz file that is not
// gzip).
func (im *importer) importJSONL(ctx context.Context, name string, r io.Reader, wantGzip bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(2)
	if len(head) == 0 {
		return fmt.Errorf("import %s: %w: file is empty", name, ErrEmptyInput)
	}
	if bytes.Equal(head, gzipMagic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("import %s: %w: gzip header: %w", name, ErrCorruptInput, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 64<<10)
	} else if wantGzip {
		return fmt.Errorf("import %s: %w: name ends in .gz but the data is not gzip", name, ErrCorruptInput)
	}

	var (
		lineNo, read, parsed int64
		firstErr             string
		buf                  []byte
	)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, total, over, err := readLine(br, im.opts.MaxLineBytes, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			// A failing stream mid-file (truncated or corrupt gzip, I/O)
			// ends the whole input.
			return fmt.Errorf("import %s: line %d: %w: %w", name, lineNo+1, ErrCorruptInput, err)
		}
		buf = line[:0]
		lineNo++
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
		}
		if !over && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		read++
		im.rep.Read++
		if over {
			reason := fmt.Sprintf("line is %d bytes, over the line cap of %d bytes (%s)", total, im.opts.MaxLineBytes, im.lineCapName)
			if firstErr == "" {
				firstErr = fmt.Sprintf("line %d: %s", lineNo, reason)
			}
			im.skip(name, lineNo, "", reason)
			continue
		}
		obj, marks, fixed, err := DecodeJSONLine(line, !im.opts.StrictJSON)
		if err != nil {
			reason := fmt.Sprintf("not a JSON object: %v", err)
			if firstErr == "" {
				firstErr = fmt.Sprintf("line %d: %s", lineNo, reason)
			}
			im.skip(name, lineNo, "", reason)
			continue
		}
		parsed++
		if fixed {
			im.repaired(name, lineNo, "invalid string escapes or raw control characters were kept as literal text")
		}
		if err := im.row(name, lineNo, obj, marks); err != nil {
			return err
		}
	}
	if read == 0 {
		return fmt.Errorf("import %s: %w: no non-blank lines", name, ErrEmptyInput)
	}
	if parsed == 0 {
		return fmt.Errorf("import %s: %w: none of %d lines could be decoded as a JSON object; the first: %s", name, ErrNoParsableRows, read, firstErr)
	}
	return im.checkMatched(name, parsed)
}

// readLine reads one '\n'-terminated line (the terminator and a preceding
// '\r' removed) into buf's storage. Lines of any length are read, but one
// over max bytes is consumed without being kept: over is true, total its
// size in bytes and line empty. At the end of the stream it returns io.EOF.
func readLine(br *bufio.Reader, max int64, buf []byte) (line []byte, total int64, over bool, err error) {
	buf = buf[:0]
	for {
		frag, err := br.ReadSlice('\n')
		total += int64(len(frag))
		if !over {
			body := total
			if len(frag) > 0 && frag[len(frag)-1] == '\n' {
				body--
			}
			if body > max {
				over = true
				buf = buf[:0]
			} else {
				buf = append(buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) && total > 0 {
				break // last line without '\n'; EOF comes on the next call
			}
			return buf, total, over, err
		}
		break
	}
	buf = bytes.TrimSuffix(buf, []byte("\n"))
	buf = bytes.TrimSuffix(buf, []byte("\r"))
	return buf, total, over, nil
}

// Marks names the stand-ins that DecodeJSONLine put into decoded strings
// in place of text that is not valid Unicode. Each is a Unicode
// noncharacter (U+FDD0..U+FDEF) absent from the line, so a string holding
// one came from such text; a field is "" when the line needed none.
type Marks struct {
	// Bytes stands for each invalid UTF-8 byte.
	Bytes string
	// Surrogate stands for each \uD800..\uDFFF escape that is not half of
	// a surrogate pair (a high one followed by a low one), and so denotes
	// no character.
	Surrogate string
}

// DecodeJSONLine decodes one JSONL line into a JSON object with numbers
// kept as json.Number. It is exported for the fuzz target and for tools
// that preview a file.
//
// Text that is not valid Unicode, which encoding/json would silently turn
// into U+FFFD, is replaced by the stand-ins named in marks, so callers can
// tell which field held it: invalid UTF-8 bytes, and \u escapes of lone
// UTF-16 surrogates. With repair, a line that fails to decode only because
// of invalid string escapes (a lone '\' before a character that starts no
// JSON escape, as left by naive e-mail scrubbing: "\user@...") or raw
// control characters inside strings is decoded again with those kept as
// literal text, and repaired is true. Errors: malformed JSON, trailing
// data after the value, a value that is not an object, or (in practice
// never) a line that holds all 32 noncharacters and needs a stand-in.
func DecodeJSONLine(line []byte, repair bool) (obj map[string]any, marks Marks, repaired bool, err error) {
	if !utf8.Valid(line) {
		marks.Bytes = pickMarker(line)
		if marks.Bytes == "" {
			return nil, Marks{}, false, errors.New("line is not valid UTF-8")
		}
		line = replaceInvalidUTF8(line, marks.Bytes)
	}
	if _, lone := replaceLoneSurrogates(line, ""); lone {
		marks.Surrogate = pickMarker(line)
		if marks.Surrogate == "" {
			return nil, Marks{}, false, errors.New("line holds a \\u escape of a lone UTF-16 surrogate")
		}
		line, _ = replaceLoneSurrogates(line, marks.Surrogate)
	}
	v, err := decodeJSONValue(line)
	if err != nil && repair {
		if fixed := repairJSONStrings(line); !bytes.Equal(fixed, line) {
			if v2, err2 := decodeJSONValue(fixed); err2 == nil {
				v, err, repaired = v2, nil, true
			}
		}
	}
	if err != nil {
		return nil, Marks{}, false, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, Marks{}, false, fmt.Errorf("line holds a JSON %s, not an object", jsonKind(v))
	}
	return obj, marks, repaired, nil
}

func decodeJSONValue(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// pickMarker returns the first noncharacter in U+FDD0..U+FDEF that
// occurs in b neither as itself nor as a \u escape, or "" if all 32 do.
func pickMarker(b []byte) string {
	lower := make([]byte, len(b)) // ASCII letters lowered, for \uFDD0
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	for r := rune(0xFDD0); r <= 0xFDEF; r++ {
		m := string(r)
		if !bytes.Contains(b, []byte(m)) && !bytes.Contains(lower, fmt.Appendf(nil, `\u%04x`, r)) {
			return m
		}
	}
	return ""
}

func replaceInvalidUTF8(b []byte, marker string) []byte {
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = append(out, marker...)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out
}

// replaceLoneSurrogates rewrites, inside JSON strings only, each \u escape
// of a UTF-16 surrogate (D800..DFFF) that is not a high one directly
// followed by an escaped low one as marker; found reports whether there
// was one. Every other byte, escape and surrogate pair is kept; without a
// lone surrogate b itself is returned.
func replaceLoneSurrogates(b []byte, marker string) (out []byte, found bool) {
	last := 0 // b[:last] is already in out
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		if c == '"' {
			inString = false
			continue
		}
		if c != '\\' || i+1 >= len(b) {
			continue
		}
		u, ok := unicodeEscapeAt(b, i)
		if !ok {
			// Another escape (or a broken one): skip both bytes so that
			// an escaped '"' or '\\' is not read as structure.
			i++
			continue
		}
		lone := false
		switch {
		case u >= 0xD800 && u <= 0xDBFF:
			if lo, ok := unicodeEscapeAt(b, i+6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11 // a pair
				continue
			}
			lone = true
		case u >= 0xDC00 && u <= 0xDFFF:
			lone = true
		}
		if lone {
			out = append(out, b[last:i]...)
			out = append(out, marker...)
			last = i + 6
			found = true
		}
		i += 5
	}
	if !found {
		return b, false
	}
	return append(out, b[last:]...), true
}

// unicodeEscapeAt returns the code unit of the \uXXXX escape at b[i], or
// false if there is none there.
func unicodeEscapeAt(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var u rune
	for _, h := range b[i+2 : i+6] {
		switch {
		case h >= '0' && h <= '9':
			u = u<<4 | rune(h-'0')
		case h >= 'a' && h <= 'f':
			u = u<<4 | rune(h-'a'+10)
		case h >= 'A' && h <= 'F':
			u = u<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	return u, true
}

// repairJSONStrings rewrites, inside JSON strings only, a '\' that starts
// no valid escape as "\\" and a raw control character as \u00XX. Outside
// strings the bytes are copied unchanged.
func repairJSONStrings(b []byte) []byte {
	out := make([]byte, 0, len(b)+16)
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			out = append(out, c)
			if c == '"' {
				inString = true
			}
			continue
		}
		switch {
		case c == '"':
			inString = false
			out = append(out, c)
		case c == '\\':
			if i+1 < len(b) && validEscapeAt(b, i) {
				n := 2
				if b[i+1] == 'u' {
					n = 6
				}
				out = append(out, b[i:i+n]...)
				i += n - 1
			} else {
				out = append(out, '\\', '\\')
			}
		case c < 0x20:
			out = append(out, fmt.Sprintf(`\u%04x`, c)...)
		default:
			out = append(out, c)
		}
	}
	return out
}

// validEscapeAt reports whether b[i] == '\\' starts a JSON escape.
func validEscapeAt(b []byte, i int) bool {
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		if i+6 > len(b) {
			return false
		}
		for _, h := range b[i+2 : i+6] {
			if !isHex(h) {
				return false
			}
		}
		return true
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
