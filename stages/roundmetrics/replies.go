package roundmetrics

import (
	"math"
	"unicode/utf8"

	"github.com/spade-pipeline/spade/engines/metrics"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/schemas"
)

// ReplyStats summarises the agent's replies in one round's rollouts for
// the report (report.Replies; docs/metrics.md "Report"), one file's rows
// at a time (Add), so a large rollouts table is never held whole. Only
// the unhinted plays count: every round kind plays them, and GRPO trains
// on them. The zero value is ready to use.
type ReplyStats struct {
	plays, replies, cut, agentCut int
	stepped, unextracted          int64
	chars, tokens                 []float64
}

// Add counts the unhinted plays of rows (hinted plays are skipped).
func (s *ReplyStats) Add(rows []schemas.Rollout) {
	for _, p := range rows {
		if p.Hinted {
			continue
		}
		s.plays++
		if p.Termination == schemas.TerminationAgentCut {
			s.agentCut++
		}
		s.stepped += p.Turns
		s.unextracted += p.Unextracted
		for _, r := range p.Replies {
			s.chars = append(s.chars, float64(utf8.RuneCountInString(r)))
		}
		s.replies += len(p.Replies)
		for _, fr := range p.FinishReasons {
			if fr == model.FinishLength {
				s.cut++
			}
		}
		for _, m := range p.Messages {
			if m.Role == "assistant" && m.CompletionTokenIDs != nil {
				s.tokens = append(s.tokens, float64(len(m.CompletionTokenIDs)))
			}
		}
	}
}

// Summary returns what Add counted. A share or length over nothing is
// NaN ("no data"), never 0: the reply lengths and CutShare with no reply,
// the token lengths with no assistant turn whose token ids the server
// reported, AgentCutShare with no play, UnextractedShare with no stepped
// turn. P90 is the type-7 quantile (metrics.Summarize).
func (s *ReplyStats) Summary() *report.Replies {
	nan := math.NaN()
	out := &report.Replies{Plays: s.plays, Replies: s.replies, TokenReplies: len(s.tokens),
		CharsMean: nan, CharsP90: nan, TokensMean: nan, TokensP90: nan, CutShare: nan, AgentCutShare: nan, UnextractedShare: nan}
	// Summarize fails only on an empty or non-finite input, and lengths
	// are finite counts.
	if sum, err := metrics.Summarize(s.chars); err == nil {
		out.CharsMean, out.CharsP90 = sum.Mean, sum.P90
	}
	if sum, err := metrics.Summarize(s.tokens); err == nil {
		out.TokensMean, out.TokensP90 = sum.Mean, sum.P90
	}
	if s.replies > 0 {
		out.CutShare = float64(s.cut) / float64(s.replies)
	}
	if s.plays > 0 {
		out.AgentCutShare = float64(s.agentCut) / float64(s.plays)
	}
	if s.stepped > 0 {
		out.UnextractedShare = float64(s.unextracted) / float64(s.stepped)
	}
	return out
}
