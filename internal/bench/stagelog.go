package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// StageTime is one "stage committed" line of the runner's log: the stage,
// its round, and the seconds from the stage's start to its commit.
type StageTime struct {
	// Round is the line's round field.
	Round int
	// Stage is the line's stage field, the stage's name.
	Stage string
	// Seconds is the line's seconds field: wall-clock seconds from the
	// stage's start to its commit (>= 0).
	Seconds float64
}

// maxLogLine bounds one log line, in bytes; the runner's lines are short.
const maxLogLine = 1 << 20

// ParseStageLog reads a runner log in slog's text format (key=value pairs,
// values with spaces double-quoted as strconv.Quote writes them) and
// returns every `msg="stage committed"` line's round, stage and seconds,
// in log order. Other lines are skipped. Errors name the 1-based line and
// field of a malformed stage line; a line longer than 1 MiB is an error.
func ParseStageLog(r io.Reader) ([]StageTime, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLogLine)
	var out []StageTime
	line := 0
	for sc.Scan() {
		line++
		kv, err := parseLogfmt(sc.Text())
		if err != nil || kv["msg"] != "stage committed" {
			continue
		}
		var st StageTime
		st.Stage = kv["stage"]
		if st.Stage == "" {
			return nil, fmt.Errorf("log line %d: stage committed without field stage", line)
		}
		if st.Round, err = strconv.Atoi(kv["round"]); err != nil {
			return nil, fmt.Errorf("log line %d: field round %q: not an integer", line, kv["round"])
		}
		if st.Seconds, err = strconv.ParseFloat(kv["seconds"], 64); err != nil || !(st.Seconds >= 0) || math.IsInf(st.Seconds, 0) {
			return nil, fmt.Errorf("log line %d: field seconds %q: not a non-negative number", line, kv["seconds"])
		}
		out = append(out, st)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("log line %d: %w", line+1, err)
	}
	return out, nil
}

// parseLogfmt splits `k=v k2="quoted v"` into a map; the last of repeated
// keys wins. An unterminated or invalid quoted value is an error.
func parseLogfmt(s string) (map[string]string, error) {
	kv := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return kv, nil
		}
		eq := strings.IndexByte(s, '=')
		sp := strings.IndexByte(s, ' ')
		if eq < 0 || (sp >= 0 && sp < eq) {
			// A bare word: skip it.
			if sp < 0 {
				return kv, nil
			}
			s = s[sp:]
			continue
		}
		key := s[:eq]
		s = s[eq+1:]
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("key %s: bad quoted value: %w", key, err)
			}
			v, err := strconv.Unquote(q)
			if err != nil {
				return nil, fmt.Errorf("key %s: %w", key, err)
			}
			kv[key] = v
			s = s[len(q):]
			continue
		}
		end := strings.IndexByte(s, ' ')
		if end < 0 {
			end = len(s)
		}
		kv[key] = s[:end]
		s = s[end:]
	}
}
