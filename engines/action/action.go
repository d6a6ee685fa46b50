// Package action is the agent protocol of a text play: how the action is
// read from the agent's reply (rollout.action_format) and how observations
// list the valid actions. The formats follow what the models and the
// public code do: `boxed` is SPADE's public code (reason, then
// \boxed{action}; the last balanced box is the action), `answer_tag` is
// RLVE's and reasoning-gym's (the last <answer>...</answer>),
// `valid_actions` matches the reply against the observation's "Valid
// actions:" line (docs/environment-contract.md), `raw` steps the reply as
// it is. Reasoning (<think> blocks, a server's reasoning_content) is
// removed before extraction by the caller (model.ReplyParts).
package action

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// The action formats of rollout.action_format, declared once in
// pipeline/config (which validates the setting and may not import
// engines/); these are the same constants under the protocol's names.
const (
	// FormatValidActions matches the reply against the observation's
	// "Valid actions:" line.
	FormatValidActions = config.ActionFormatValidActions
	// FormatBoxed takes the last balanced \boxed{...} of the reply.
	FormatBoxed = config.ActionFormatBoxed
	// FormatAnswerTag takes the last <answer>...</answer> of the reply.
	FormatAnswerTag = config.ActionFormatAnswerTag
	// FormatRaw steps the reply, trimmed, as it is.
	FormatRaw = config.ActionFormatRaw
)

// Formats lists the action formats, the default first.
func Formats() []string {
	return slices.Clone(config.ActionFormats)
}

// CheckFormat returns nil for a known format, else an error listing them.
func CheckFormat(f string) error {
	for _, k := range Formats() {
		if f == k {
			return nil
		}
	}
	return fmt.Errorf("unknown action format %q (want one of %s)", f, strings.Join(Formats(), ", "))
}

// ValidActionsPrefix starts the line of an observation that lists its
// valid actions, separated by " | " (spade_env.valid_actions_line).
const ValidActionsPrefix = "Valid actions:"

// ValidActions returns the actions of the last "Valid actions: a | b | c"
// line of obs (surrounding whitespace trimmed, empty entries dropped), and
// whether obs has such a line with at least one action.
func ValidActions(obs string) ([]string, bool) {
	lines := strings.Split(obs, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		rest, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), ValidActionsPrefix)
		if !ok {
			continue
		}
		var out []string
		for _, a := range strings.Split(rest, "|") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		if len(out) > 0 {
			return out, true
		}
	}
	return nil, false
}

// Extract reads the action from answer (the reply without its reasoning)
// in the given format; obs is the observation the reply answers (used by
// FormatValidActions). ok is false when the format finds no action; the
// caller then steps answer as it is, trimmed, so the environment gives its
// feedback on a malformed action. An unknown format behaves as FormatRaw.
func Extract(format, answer, obs string) (act string, ok bool) {
	answer = strings.TrimSpace(answer)
	switch format {
	case FormatBoxed:
		if b, found := lastBoxed(answer); found {
			return b, true
		}
	case FormatAnswerTag:
		if a, found := lastAnswerTag(answer); found {
			return a, true
		}
	case FormatValidActions:
		acts, _ := ValidActions(obs)
		if a, found := matchValid(answer, acts); found {
			return a, true
		}
	default:
		return answer, answer != ""
	}
	return answer, false
}

// lastBoxed returns the content of the last balanced \boxed{...} (or
// \fbox{...}) in s, trimmed and with a \text{...} wrapper removed.
func lastBoxed(s string) (string, bool) {
	best, found, bestAt := "", false, -1
	for _, marker := range []string{`\boxed`, `\fbox`} {
		from := 0
		for {
			i := strings.Index(s[from:], marker)
			if i < 0 {
				break
			}
			start := from + i + len(marker)
			from = start
			j := start
			for j < len(s) && s[j] == ' ' {
				j++
			}
			if j >= len(s) || s[j] != '{' {
				continue
			}
			inner, end, balanced := braced(s, j)
			if !balanced {
				continue
			}
			if !found || start > bestAt {
				best, found, bestAt = inner, true, start
			}
			from = end
		}
	}
	if !found {
		return "", false
	}
	best = unwrapText(strings.TrimSpace(best))
	return best, best != ""
}

// braced returns the text between the '{' at s[open] and its matching
// '}', the index after that '}', and whether it is balanced.
func braced(s string, open int) (inner string, end int, ok bool) {
	depth := 0
	for k := open; k < len(s); k++ {
		switch s[k] {
		case '\\':
			k++ // an escaped brace \{ or \} does not count
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[open+1 : k], k + 1, true
			}
		}
	}
	return "", len(s), false
}

// unwrapText removes one \text{...}, \textbf{...}, \mathrm{...} or
// \texttt{...} that wraps all of s.
func unwrapText(s string) string {
	for _, w := range []string{`\text`, `\textbf`, `\texttt`, `\mathrm`, `\mathtt`} {
		if rest, ok := strings.CutPrefix(s, w); ok && strings.HasPrefix(rest, "{") {
			if inner, end, bal := braced(rest, 0); bal && end == len(rest) {
				return strings.TrimSpace(inner)
			}
		}
	}
	return s
}

// lastAnswerTag returns the content of the last <answer>...</answer> in s,
// trimmed.
func lastAnswerTag(s string) (string, bool) {
	j := strings.LastIndex(s, "</answer>")
	if j < 0 {
		return "", false
	}
	i := strings.LastIndex(s[:j], "<answer>")
	if i < 0 {
		return "", false
	}
	a := strings.TrimSpace(s[i+len("<answer>") : j])
	return a, a != ""
}

// matchValid finds the valid action a reply means: the reply exactly;
// else equal ignoring case, surrounding markdown (* _ ` #), quotes,
// brackets and final punctuation; else the listed action that ends the
// reply, compared the same way (the longest when several do), which
// covers "Action: X", "I choose `X`." and a sentence then the action on
// its own line.
func matchValid(reply string, acts []string) (string, bool) {
	if len(acts) == 0 {
		return "", false
	}
	for _, a := range acts {
		if reply == a {
			return a, true
		}
	}
	r := loose(reply)
	for _, a := range acts {
		if r == loose(a) && r != "" {
			return a, true
		}
	}
	best := ""
	for _, a := range acts {
		la := loose(a)
		if la == "" || !strings.HasSuffix(r, la) {
			continue
		}
		if before := []rune(r[:len(r)-len(la)]); len(before) > 0 {
			if c := before[len(before)-1]; unicode.IsLetter(c) || unicode.IsDigit(c) {
				continue // "readd 1" does not end with the action "add 1"
			}
		}
		if len(la) > len(loose(best)) {
			best = a
		}
	}
	return best, best != ""
}

// decor is what loose strips around a reply: markdown emphasis and code,
// headings, quotes, brackets and final punctuation.
const decor = "*_`#\"'“”‘’()[]<>.!:;, \t\n\r"

// loose is s lower-cased, with whitespace runs made one space and decor
// trimmed from both ends.
func loose(s string) string {
	s = strings.Join(strings.Fields(strings.ToLower(s)), " ")
	return strings.Trim(s, decor)
}
