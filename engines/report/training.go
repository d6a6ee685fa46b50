package report

import (
	"fmt"
	"math"
	"strconv"
)

// Training is one round's GRPO step as its train_metrics table records it
// (docs/tables.md "train_metrics"); stages/grpo.TrainSummary fills it. A
// float field that is NaN had no data this round: no inner step wrote it
// (trainer none, an empty batch, a trainer that leaves the key out, kl
// with grpo.kl_beta 0), or it would be a mean over nothing (the log-prob
// mismatch when no sampled token carried a server log-prob). It shows as
// "no data" in a plot without any round, a gap in the others and "–" in
// the table, never as 0.
type Training struct {
	// Trained is true when the trainer ran this round (step-0 metric
	// trained = 1).
	Trained bool
	// Steps is the number of inner optimiser steps (step >= 1) with a row;
	// 0 when the trainer did not run.
	Steps int
	// Loss is the mean over the inner steps of the step's loss (the
	// policy-gradient term plus kl_beta × KL, a token mean; a plain
	// number, negative when the batch's advantages favour its tokens).
	Loss float64
	// GradNorm is the mean over the inner steps of the global gradient L2
	// norm before clipping.
	GradNorm float64
	// ClipFraction is the mean over the inner steps of the share of
	// trained tokens whose clipped branch was active, in [0, 1] (0 on the
	// first inner step by construction: the ratio is 1 there).
	ClipFraction float64
	// KL is the mean over the inner steps of the k3 KL estimate to the
	// reference, in nats per trained token; NaN when it is not computed
	// (grpo.kl_beta 0).
	KL float64
	// TrainedTokens is the mean over the inner steps of the tokens in the
	// loss (the same on every step of a round).
	TrainedTokens float64
	// LogprobMismatchMean and LogprobMismatchMax are the mean and largest
	// |logp_trainer − logp_sampler| in nats over the trained tokens that
	// carry the server's log-prob, from the first inner step; NaN when no
	// token carries one (SamplerLogprobTokens 0).
	LogprobMismatchMean, LogprobMismatchMax float64
	// SamplerLogprobTokens counts the tokens compared; NaN when the
	// trainer did not report it.
	SamplerLogprobTokens float64
	// TISClipFraction is the share, in [0, 1], of those tokens whose
	// importance weight grpo.tis_cap bound; NaN with no such token or no
	// cap.
	TISClipFraction float64
	// AgentGroups and ZeroVarianceGroups are the step-0 counts of the
	// batch's agent groups (an environment's unhinted plays) and of those
	// whose rewards all tie (no gradient); NaN when not recorded.
	AgentGroups, ZeroVarianceGroups float64
	// ZeroVarianceShare is ZeroVarianceGroups / AgentGroups, in [0, 1];
	// NaN when no group exists.
	ZeroVarianceShare float64
}

// Replies summarises the agent's replies in one round's unhinted plays
// (the rollouts rows with hinted false: what every round kind plays and
// what GRPO trains on); stages/roundmetrics.ReplyStats fills it from the
// round's rollouts table. A float field that is NaN had nothing to be
// measured over (see each field) and shows as "no data", never as 0.
type Replies struct {
	// Plays is the number of unhinted plays; Replies the agent's answered
	// calls in them (rollouts.replies, one per call, stepped or not).
	Plays, Replies int
	// CharsMean and CharsP90 are the mean and the 90th percentile (type 7)
	// of a reply's length in Unicode code points (rollouts.replies, the
	// content as the server sent it, reasoning blocks included); NaN when
	// no reply exists.
	CharsMean, CharsP90 float64
	// TokenReplies counts the assistant turns whose completion token ids
	// the server reported (rollouts.messages.completion_token_ids not
	// NULL); TokensMean and TokensP90 are the mean and 90th percentile of
	// their lengths in tokens, NaN when TokenReplies is 0 (the procedural
	// model, a server that reports no token ids).
	TokenReplies          int
	TokensMean, TokensP90 float64
	// CutShare is the share of replies whose finish_reason is "length"
	// (cut at rollout.max_tokens); NaN with no reply.
	CutShare float64
	// AgentCutShare is the share of plays that ended with termination
	// agent_cut (a cut reply ends the play unstepped); NaN with no play.
	AgentCutShare float64
	// UnextractedShare is rollouts.unextracted summed over the plays
	// divided by their stepped turns (rollouts.turns): the share of
	// stepped replies that held no action in rollout.action_format; NaN
	// with no stepped turn.
	UnextractedShare float64
}

// Titles of the plays and training plots, also their SVG <title>.
const (
	TitleReplyChars   = "Agent reply length (characters)"
	TitleReplyTokens  = "Agent reply length (tokens)"
	TitleCutReplies   = "Cut replies and unextracted actions"
	TitleOnPolicy     = "On-policy (metrics on_policy)"
	TitleLoss         = "Training loss"
	TitleGradNorm     = "Gradient norm (before clipping)"
	TitleClipFraction = "Clip fraction"
	TitleKL           = "KL to the reference"
	TitleTrainedTok   = "Trained tokens"
	TitleMismatch     = "Log-prob mismatch, trainer vs sampler"
	TitleZeroVariance = "Zero-variance groups"
)

// replyCharts builds the plots of the agent's replies and of on_policy,
// in page order. Their lines join every round: a reply's length is the
// policy's, whichever population it played.
func replyCharts(rounds []RoundSummary) []chart {
	c := commonAxis(rounds)
	rep := func(f func(Replies) float64) func(RoundSummary) float64 {
		return func(r RoundSummary) float64 {
			if r.Replies == nil {
				return math.NaN()
			}
			return f(*r.Replies)
		}
	}
	length := func(id, title, unit, why string, mean, p90 func(Replies) float64) chart {
		return chart{id: id, title: title, yLabel: unit + " per reply", yMin: math.NaN(), yMax: math.NaN(), zeroLine: true, axis: c, noData: why,
			series: []series{
				{name: "mean", color: palette[0], width: strokeMain, points: roundPoints(rounds, rep(mean))},
				{name: "p90", color: palette[3], width: strokeMain, dashed: true, points: roundPoints(rounds, rep(p90))},
			}}
	}
	onPolicy := func(r RoundSummary) float64 {
		if r.PolicyCalls == 0 {
			return math.NaN()
		}
		if r.OffPolicy {
			return 0
		}
		return 1
	}
	return []chart{
		length("reply-chars", TitleReplyChars, "characters", "no data (no reply)",
			func(p Replies) float64 { return p.CharsMean }, func(p Replies) float64 { return p.CharsP90 }),
		length("reply-tokens", TitleReplyTokens, "tokens", "no data (the server reported no token ids)",
			func(p Replies) float64 { return p.TokensMean }, func(p Replies) float64 { return p.TokensP90 }),
		{id: "cut", title: TitleCutReplies, yLabel: "share", yMin: 0, yMax: 1, axis: c, noData: "no data (no reply)", series: []series{
			{name: "replies cut (finish_reason length)", color: palette[0], width: strokeMain, points: roundPoints(rounds, rep(func(p Replies) float64 { return p.CutShare }))},
			{name: "plays ended agent_cut", color: palette[3], width: strokeMain, dashed: true, points: roundPoints(rounds, rep(func(p Replies) float64 { return p.AgentCutShare }))},
			{name: "stepped replies without an action", color: palette[2], width: strokeMain, points: roundPoints(rounds, rep(func(p Replies) float64 { return p.UnextractedShare }))},
		}},
		{id: "on-policy", title: TitleOnPolicy, yLabel: "on_policy (1 = on policy)", yMin: 0, yMax: 1, axis: c,
			noData: "no data (no call answered by a served model)",
			series: []series{{name: "on_policy", color: palette[0], width: strokeMain, points: roundPoints(rounds, onPolicy)}}},
	}
}

// trainCharts builds the training-dynamics plots in page order.
func trainCharts(rounds []RoundSummary) []chart {
	c := commonAxis(rounds)
	tr := func(f func(Training) float64) []point {
		return roundPoints(rounds, func(r RoundSummary) float64 {
			if r.Training == nil {
				return math.NaN()
			}
			return f(*r.Training)
		})
	}
	const noStep = "no data (no trainer step wrote it)"
	fit := func(id, title, yLabel, name string, f func(Training) float64) chart {
		return chart{id: id, title: title, yLabel: yLabel, yMin: math.NaN(), yMax: math.NaN(), zeroLine: true, axis: c, noData: noStep,
			series: []series{{name: name, color: palette[0], width: strokeMain, points: tr(f)}}}
	}
	return []chart{
		fit("loss", TitleLoss, "loss", "loss", func(t Training) float64 { return t.Loss }),
		fit("grad-norm", TitleGradNorm, "L2 norm", "grad_norm", func(t Training) float64 { return t.GradNorm }),
		{id: "clip", title: TitleClipFraction, yLabel: "share of trained tokens", yMin: 0, yMax: 1, axis: c, noData: noStep, series: []series{
			{name: "clip_fraction (mean over inner steps)", color: palette[0], width: strokeMain, points: tr(func(t Training) float64 { return t.ClipFraction })},
			{name: "tis_clip_fraction (tokens with a sampler log-prob)", color: palette[3], width: strokeMain, dashed: true, points: tr(func(t Training) float64 { return t.TISClipFraction })},
		}},
		fit("kl", TitleKL, "nats per token", "kl", func(t Training) float64 { return t.KL }).
			withNoData("no data (not computed: grpo.kl_beta 0, or no trainer step)"),
		fit("trained-tokens", TitleTrainedTok, "tokens in the loss", "trained_tokens", func(t Training) float64 { return t.TrainedTokens }),
		{id: "mismatch", title: TitleMismatch, yLabel: "nats per token", yMin: math.NaN(), yMax: math.NaN(), zeroLine: true, axis: c,
			noData: "no data (no trained token carried a server log-prob)", series: []series{
				{name: "mean", color: palette[0], width: strokeMain, points: tr(func(t Training) float64 { return t.LogprobMismatchMean })},
				{name: "max", color: palette[3], width: strokeMain, dashed: true, points: tr(func(t Training) float64 { return t.LogprobMismatchMax })},
			}},
		{id: "zero-variance", title: TitleZeroVariance, yLabel: "share of agent groups", yMin: 0, yMax: 1, axis: c,
			noData: "no data (no agent group)", series: []series{
				{name: "zero_variance_groups / agent_groups", color: palette[0], width: strokeMain, points: tr(func(t Training) float64 { return t.ZeroVarianceShare })},
			}},
	}
}

// withNoData returns c with another "no data" text.
func (c chart) withNoData(text string) chart {
	c.noData = text
	return c
}

// roundPoints is one point per round, all of one population: unlike win
// rate, these series are the policy's and join every round.
func roundPoints(rounds []RoundSummary, f func(RoundSummary) float64) []point {
	out := make([]point, len(rounds))
	for i, r := range rounds {
		out[i] = point{x: float64(r.Round), y: f(r)}
	}
	return out
}

// trainRow formats one round's training summary; columns match the
// training table's header in the template.
func trainRow(r RoundSummary) []string {
	t := r.Training
	if t == nil {
		row := []string{strconv.Itoa(r.Round), "no train_metrics"}
		for range 11 {
			row = append(row, "–")
		}
		return row
	}
	trained := "no"
	if t.Trained {
		trained = "yes"
	}
	groups := "–"
	if !math.IsNaN(t.AgentGroups) && !math.IsNaN(t.ZeroVarianceGroups) {
		groups = fmt.Sprintf("%s/%s", cell(t.ZeroVarianceGroups, 0), cell(t.AgentGroups, 0))
	}
	return []string{
		strconv.Itoa(r.Round), trained, strconv.Itoa(t.Steps),
		cell(t.Loss, 4), cell(t.GradNorm, 3), cell(t.ClipFraction, 3), cell(t.KL, 4), cell(t.TrainedTokens, 0),
		cell(t.LogprobMismatchMean, 4), cell(t.LogprobMismatchMax, 4), cell(t.SamplerLogprobTokens, 0), cell(t.TISClipFraction, 3),
		groups,
	}
}

// replyRow formats one round's reply summary and on_policy; columns
// match the replies table's header in the template.
func replyRow(r RoundSummary) []string {
	onPolicy := "–"
	switch {
	case r.PolicyCalls > 0 && r.OffPolicy:
		onPolicy = fmt.Sprintf("0 (%d calls)", r.PolicyCalls)
	case r.PolicyCalls > 0:
		onPolicy = fmt.Sprintf("1 (%d calls)", r.PolicyCalls)
	}
	p := r.Replies
	if p == nil {
		row := []string{strconv.Itoa(r.Round)}
		for range 10 {
			row = append(row, "–")
		}
		return append(row, onPolicy)
	}
	return []string{
		strconv.Itoa(r.Round), strconv.Itoa(p.Plays), strconv.Itoa(p.Replies),
		cell(p.CharsMean, 0), cell(p.CharsP90, 0), strconv.Itoa(p.TokenReplies), cell(p.TokensMean, 0), cell(p.TokensP90, 0),
		cell(p.CutShare, 3), cell(p.AgentCutShare, 3), cell(p.UnextractedShare, 3), onPolicy,
	}
}

// validateTraining checks one round's Training and Replies (Render's
// errors): shares in [0, 1] or NaN, lengths and counts not negative, no
// ±Inf.
func validateTraining(where string, r RoundSummary) error {
	type field struct {
		name  string
		v     float64
		share bool
	}
	var fs []field
	if t := r.Training; t != nil {
		fs = append(fs, field{"Training.Loss", t.Loss, false}, field{"Training.GradNorm", t.GradNorm, false},
			field{"Training.ClipFraction", t.ClipFraction, true}, field{"Training.KL", t.KL, false},
			field{"Training.TrainedTokens", t.TrainedTokens, false}, field{"Training.LogprobMismatchMean", t.LogprobMismatchMean, false},
			field{"Training.LogprobMismatchMax", t.LogprobMismatchMax, false}, field{"Training.SamplerLogprobTokens", t.SamplerLogprobTokens, false},
			field{"Training.TISClipFraction", t.TISClipFraction, true}, field{"Training.AgentGroups", t.AgentGroups, false},
			field{"Training.ZeroVarianceGroups", t.ZeroVarianceGroups, false}, field{"Training.ZeroVarianceShare", t.ZeroVarianceShare, true})
		if t.Steps < 0 || t.GradNorm < 0 || t.TrainedTokens < 0 || t.SamplerLogprobTokens < 0 || t.AgentGroups < 0 || t.ZeroVarianceGroups < 0 {
			return fmt.Errorf("%s: a Training count or norm is negative", where)
		}
	}
	if p := r.Replies; p != nil {
		fs = append(fs, field{"Replies.CharsMean", p.CharsMean, false}, field{"Replies.CharsP90", p.CharsP90, false},
			field{"Replies.TokensMean", p.TokensMean, false}, field{"Replies.TokensP90", p.TokensP90, false},
			field{"Replies.CutShare", p.CutShare, true}, field{"Replies.AgentCutShare", p.AgentCutShare, true},
			field{"Replies.UnextractedShare", p.UnextractedShare, true})
		if p.Plays < 0 || p.Replies < 0 || p.TokenReplies < 0 || p.CharsMean < 0 || p.TokensMean < 0 {
			return fmt.Errorf("%s: a Replies count or length is negative", where)
		}
	}
	if r.PolicyCalls < 0 {
		return fmt.Errorf("%s: PolicyCalls = %d is negative", where, r.PolicyCalls)
	}
	for _, f := range fs {
		if math.IsInf(f.v, 0) {
			return fmt.Errorf("%s: %s is infinite", where, f.name)
		}
		if f.share && (f.v < 0 || f.v > 1) {
			return fmt.Errorf("%s: %s = %v is outside [0, 1]", where, f.name, f.v)
		}
	}
	return nil
}
