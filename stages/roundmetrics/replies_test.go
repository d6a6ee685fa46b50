package roundmetrics_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
)

// TestReplyStats summarises the agent's replies of unhinted plays, given
// in two Add calls as the report reads a table file by file: lengths in
// code points, the p90 of type 7, cut replies by finish_reason,
// agent_cut plays, unextracted actions per stepped turn, token lengths of
// the assistant turns whose token ids the server reported (an empty list
// is zero ids, NULL none); a hinted play is left out.
func TestReplyStats(t *testing.T) {
	var s roundmetrics.ReplyStats
	s.Add([]schemas.Rollout{
		{Replies: []string{"abcd", "héé"}, FinishReasons: []string{"stop", "length"}, Termination: "agent_cut", Turns: 1, Unextracted: 1,
			Messages: []schemas.Message{{Role: "user"}, {Role: "assistant", CompletionTokenIDs: []int64{1, 2, 3}}, {Role: "assistant"}}},
		{Hinted: true, Replies: []string{"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}, FinishReasons: []string{"length"}, Termination: "agent_cut", Turns: 9, Unextracted: 9},
	})
	s.Add([]schemas.Rollout{
		{Replies: []string{"ab", "", "abcdefgh"}, FinishReasons: []string{"stop", "stop", "stop"}, Termination: "terminated", Turns: 3,
			Messages: []schemas.Message{{Role: "assistant", CompletionTokenIDs: []int64{}}, {Role: "tool", CompletionTokenIDs: []int64{9}}}},
	})
	got := s.Summary()
	require.Equal(t, 2, got.Plays)
	require.Equal(t, 5, got.Replies)
	// Lengths 4, 3, 2, 0, 8: mean 3.4; sorted 0 2 3 4 8, h = 3.6: 4 + 0.6*4.
	require.InDelta(t, 3.4, got.CharsMean, 1e-12)
	require.InDelta(t, 6.4, got.CharsP90, 1e-12)
	require.Equal(t, 2, got.TokenReplies, "an empty id list counts, a NULL one and a tool message do not")
	require.InDelta(t, 1.5, got.TokensMean, 1e-12)
	require.InDelta(t, 0.2, got.CutShare, 1e-12)
	require.InDelta(t, 0.5, got.AgentCutShare, 1e-12)
	require.InDelta(t, 0.25, got.UnextractedShare, 1e-12)
}

// TestReplyStatsNoData: with no play, or plays without replies, token ids
// or stepped turns, the shares and lengths over nothing are NaN, never 0;
// counts stay 0.
func TestReplyStatsNoData(t *testing.T) {
	var none roundmetrics.ReplyStats
	got := none.Summary()
	require.Zero(t, got.Plays)
	for name, v := range map[string]float64{"CharsMean": got.CharsMean, "CharsP90": got.CharsP90, "TokensMean": got.TokensMean,
		"TokensP90": got.TokensP90, "CutShare": got.CutShare, "AgentCutShare": got.AgentCutShare, "UnextractedShare": got.UnextractedShare} {
		require.True(t, math.IsNaN(v), "%s = %v with no play", name, v)
	}
	var silent roundmetrics.ReplyStats
	silent.Add([]schemas.Rollout{{Termination: "error", Error: "sandbox died"}})
	got = silent.Summary()
	require.Equal(t, 1, got.Plays)
	require.Equal(t, 0.0, got.AgentCutShare, "one play, not cut: a measured 0")
	require.True(t, math.IsNaN(got.CutShare) && math.IsNaN(got.CharsMean) && math.IsNaN(got.TokensMean) && math.IsNaN(got.UnextractedShare))
}

// TestSummaryOnPolicy: the metrics table holds on_policy 0 both for a
// round answered by another policy and for a round without served calls;
// the summary tells them apart by policy_calls (OffPolicy only for the
// first, PolicyCalls 0 for the second, which the report shows as no
// data).
func TestSummaryOnPolicy(t *testing.T) {
	row := func(name string, v float64) schemas.Metric { return schemas.Metric{Name: name, Value: v} }
	off := roundmetrics.Summary(1, true, []schemas.Metric{row(roundmetrics.OnPolicy, 0), row(roundmetrics.PolicyCalls, 12)})
	require.True(t, off.OffPolicy)
	require.Equal(t, 12, off.PolicyCalls)
	on := roundmetrics.Summary(1, true, []schemas.Metric{row(roundmetrics.OnPolicy, 1), row(roundmetrics.PolicyCalls, 12)})
	require.False(t, on.OffPolicy)
	none := roundmetrics.Summary(1, true, []schemas.Metric{row(roundmetrics.OnPolicy, 0), row(roundmetrics.PolicyCalls, 0)})
	require.False(t, none.OffPolicy)
	require.Zero(t, none.PolicyCalls)
	require.Nil(t, none.Training)
	require.Nil(t, none.Replies)
}
