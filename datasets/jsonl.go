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
			im.skip(name, lineNo, "", fmt.Sprintf("line is %d bytes, over the line cap of %d bytes (MaxLineBytes)", total, im.opts.MaxLineBytes))
			continue
		}
		obj, marker, fixed, err := DecodeJSONLine(line, !im.opts.StrictJSON)
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
		if err := im.row(name, lineNo, obj, marker); err != nil {
			return err
		}
	}
	if read == 0 {
		return fmt.Errorf("import %s: %w: no non-blank lines", name, ErrEmptyInput)
	}
	if parsed == 0 {
		return fmt.Errorf("import %s: %w: none of %d lines is a JSON object (first: %s)", name, ErrNoParsableRows, read, firstErr)
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

// DecodeJSONLine decodes one JSONL line into a JSON object with numbers
// kept as json.Number. It is exported for the fuzz target and for tools
// that preview a file.
//
// Invalid UTF-8 bytes are replaced by marker, a Unicode noncharacter
// (U+FDD0..U+FDEF) absent from the line, so callers can tell which field
// held them (encoding/json would silently turn them into U+FFFD); marker
// is "" for a valid line. With repair, a line that fails to decode only
// because of invalid string escapes (a lone '\' before a character that
// starts no JSON escape, as left by naive e-mail scrubbing: "\user@...")
// or raw control characters inside strings is decoded again with those
// kept as literal text, and repaired is true. Errors: malformed JSON,
// trailing data after the value, or a value that is not an object.
func DecodeJSONLine(line []byte, repair bool) (obj map[string]any, marker string, repaired bool, err error) {
	if !utf8.Valid(line) {
		marker = pickMarker(line)
		if marker == "" {
			return nil, "", false, errors.New("line is not valid UTF-8")
		}
		line = replaceInvalidUTF8(line, marker)
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
		return nil, "", false, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, "", false, fmt.Errorf("line holds a JSON %s, not an object", jsonKind(v))
	}
	return obj, marker, repaired, nil
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

// pickMarker returns the first noncharacter in U+FDD0..U+FDEF that does
// not occur in b, or "" if all 32 do.
func pickMarker(b []byte) string {
	for r := rune(0xFDD0); r <= 0xFDEF; r++ {
		m := string(r)
		if !bytes.Contains(b, []byte(m)) {
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
