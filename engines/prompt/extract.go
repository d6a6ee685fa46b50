package prompt

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
)

// ErrNoCode means a designer response contains nothing code-like: no
// usable fenced block and no line that starts Python code.
var ErrNoCode = errors.New("prompt: no Python code in response")

// envClassRE matches a class statement deriving from Env or ToolUseEnv
// (also qualified, e.g. spade_env.Env, and with further bases).
var envClassRE = regexp.MustCompile(`(?m)^[ \t]*class[ \t]+\w+[ \t]*\([^)\n]*\b(?:Env|ToolUseEnv)\b[^)\n]*\)[ \t]*:`)

// codeStartRE matches a line that can begin a Python module; leading prose
// before the first such line is dropped when a response has no fences.
var codeStartRE = regexp.MustCompile(`^(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+[\w.]+|class[ \t]+\w+[ \t]*[(:]|def[ \t]+\w+[ \t]*\(|async[ \t]+def\b|@[\w.]+|#!|# -\*-|"""|''')`)

// pythonTags are fence info strings taken as Python (lower-cased).
var pythonTags = map[string]bool{"": true, "python": true, "py": true, "python3": true, "py3": true}

type block struct {
	tag  string
	code string
}

// ExtractCode returns the Python module in a designer's response. Fences
// are ``` or ~~~ lines (CommonMark style, any indentation, optional info
// string); an unterminated fence runs to the end (truncated output). Among
// blocks tagged python/py/python3 or untagged, it picks the longest that
// defines an Env or ToolUseEnv subclass, else the longest; a block with
// another tag is used only if it defines such a subclass. Without any
// fence the text from the first line that starts Python code (import,
// from, class, def, decorator, docstring) to the end is taken. CRLF and CR
// are read as LF. The result is NormalizeSource'd. Errors: ErrNoCode.
func ExtractCode(response string) (string, error) {
	text := strings.TrimPrefix(response, "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	blocks, fenced := fencedBlocks(text)
	if fenced {
		if b, ok := pick(blocks, func(b block) bool { return pythonTags[b.tag] && envClassRE.MatchString(b.code) }); ok {
			return b, nil
		}
		if b, ok := pick(blocks, func(b block) bool { return pythonTags[b.tag] }); ok {
			return b, nil
		}
		if b, ok := pick(blocks, func(b block) bool { return envClassRE.MatchString(b.code) }); ok {
			return b, nil
		}
		return "", ErrNoCode
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if codeStartRE.MatchString(l) {
			code := NormalizeSource(strings.Join(lines[i:], "\n"))
			if code != "" {
				return code, nil
			}
		}
	}
	return "", ErrNoCode
}

// pick returns the normalised code of the longest non-empty block that
// satisfies ok; ties go to the later block (a revised version).
func pick(blocks []block, ok func(block) bool) (string, bool) {
	best, found := "", false
	for _, b := range blocks {
		if !ok(b) {
			continue
		}
		code := NormalizeSource(b.code)
		if code == "" {
			continue
		}
		if !found || len(code) >= len(best) {
			best, found = code, true
		}
	}
	return best, found
}

// fencedBlocks splits text into fenced blocks; fenced reports whether any
// fence line exists at all.
func fencedBlocks(text string) ([]block, bool) {
	var (
		blocks []block
		fenced bool
		inside bool
		cur    block
		body   []string
		fChar  byte
		fLen   int
		indent string
	)
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		if !inside {
			c, n := fenceRun(trimmed)
			if n < 3 {
				continue
			}
			info := strings.TrimSpace(trimmed[n:])
			if c == '`' && strings.Contains(info, "`") {
				continue // inline code span, not a fence
			}
			fenced, inside = true, true
			fChar, fLen = c, n
			indent = line[:len(line)-len(trimmed)]
			tag := info
			if f := strings.Fields(info); len(f) > 0 {
				tag = f[0]
			}
			cur = block{tag: strings.ToLower(strings.TrimPrefix(tag, "."))}
			body = body[:0]
			continue
		}
		if c, n := fenceRun(trimmed); c == fChar && n >= fLen && strings.TrimSpace(trimmed[n:]) == "" {
			cur.code = strings.Join(body, "\n")
			blocks = append(blocks, cur)
			inside = false
			continue
		}
		body = append(body, strings.TrimPrefix(line, indent))
	}
	if inside {
		cur.code = strings.Join(body, "\n")
		blocks = append(blocks, cur)
	}
	return blocks, fenced
}

// fenceRun returns the fence character and run length at the start of s
// (0 if s does not start with ``` or ~~~).
func fenceRun(s string) (byte, int) {
	if s == "" || (s[0] != '`' && s[0] != '~') {
		return 0, 0
	}
	c := s[0]
	n := 0
	for n < len(s) && s[n] == c {
		n++
	}
	return c, n
}

// NormalizeSource canonicalises Python source for hashing and storage:
// a leading UTF-8 BOM removed, CRLF and CR turned into LF, trailing spaces
// and tabs stripped from every line, leading and trailing blank lines
// dropped, and exactly one final newline (empty input stays empty).
func NormalizeSource(code string) string {
	code = strings.TrimPrefix(code, "\ufeff")
	code = strings.ReplaceAll(code, "\r\n", "\n")
	code = strings.ReplaceAll(code, "\r", "\n")
	lines := strings.Split(code, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	start, end := 0, len(lines)
	for start < end && lines[start] == "" {
		start++
	}
	for end > start && lines[end-1] == "" {
		end--
	}
	if start == end {
		return ""
	}
	return strings.Join(lines[start:end], "\n") + "\n"
}

// EnvID identifies an environment by its source: the first 16 hex digits
// of the SHA-256 of NormalizeSource(code), so whitespace-only differences
// give the same id (the designs table's env_id).
func EnvID(code string) string {
	sum := sha256.Sum256([]byte(NormalizeSource(code)))
	return hex.EncodeToString(sum[:])[:16]
}
