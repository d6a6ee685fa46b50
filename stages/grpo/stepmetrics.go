package grpo

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"sort"

	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// The train_metrics names that stepMetricRows writes (docs/tables.md
// "train_metrics", docs/training.md "Metrics") and TrainSummary reads.
const (
	metricLoss                 = "loss"
	metricKL                   = "kl"
	metricClipFraction         = "clip_fraction"
	metricGradNorm             = "grad_norm"
	metricTokens               = "tokens"
	metricTrainedTokens        = "trained_tokens"
	metricLR                   = "lr"
	metricMicroBatches         = "micro_batches"
	metricMismatchMean         = "logprob_mismatch_mean"
	metricMismatchMax          = "logprob_mismatch_max"
	metricSamplerLogprobTokens = "sampler_logprob_tokens"
	metricTISClipFraction      = "tis_clip_fraction"
	metricTokensPerS           = "tokens_per_s"
	metricSeconds              = "seconds"
	metricPeakMemory           = "peak_memory_bytes"
)

// warnMismatch logs a warning when the first step's mean |logp_trainer -
// logp_sampler| is above grpo.mismatch_warn: the server that sampled the
// batch did not hold the trainer's input weights (a stale or other
// checkpoint, another dtype or quantization), so the update is
// off-policy by that much.
func (s *Stage) warnMismatch(env *pipeline.Env, st StepMetrics) {
	warn := env.Config.GRPO.MismatchWarn
	if warn <= 0 {
		warn = config.DefaultMismatchWarn
	}
	if st.SamplerLogprobTokens == 0 || st.LogprobMismatchMean <= warn {
		return
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("the server's log-probs differ from the trainer's: the sampled tokens came from another policy than the trainer's input checkpoint (see docs/training.md \"Training on the sampled tokens\"; grpo.tis_cap corrects for it)",
		"round", env.Round.Round, "logprob_mismatch_mean", st.LogprobMismatchMean, "logprob_mismatch_max", st.LogprobMismatchMax,
		"tokens", st.SamplerLogprobTokens, "grpo.mismatch_warn", warn)
}

// stepMetricRows returns the train_metrics rows of one optimiser step, in
// name order, from the fixed set: loss, kl, clip_fraction, grad_norm,
// tokens, trained_tokens, lr, micro_batches, logprob_mismatch_mean,
// logprob_mismatch_max, sampler_logprob_tokens and tis_clip_fraction,
// plus the measurements tokens_per_s, seconds and peak_memory_bytes when
// timings is true (observe.timings; they differ between identical runs).
//
// A metric with no data has no row, never a 0 (docs/tables.md
// "train_metrics"): a key the step line leaves out or writes as null (the
// project's trainer writes kl null when grpo.kl_beta is 0, since it is
// then not computed); and logprob_mismatch_mean, logprob_mismatch_max and
// tis_clip_fraction whenever sampler_logprob_tokens is 0 or absent, being
// a mean, a maximum and a share over those tokens, whatever the line says
// (a server that returns no log-probs, e.g. `transformers serve`, and
// trainers that write 0 there). A StepMetrics built in Go (Raw nil) has
// every key. Keys of the line that StepMetrics has no field for are not
// stored, so the table's content is reproducible whatever a trainer adds.
func stepMetricRows(st StepMetrics, timings bool) []schemas.TrainMetric {
	vals := map[string]float64{
		metricLoss: st.Loss, metricKL: st.KL, metricClipFraction: st.ClipFraction, metricGradNorm: st.GradNorm,
		metricTokens: float64(st.Tokens), metricTrainedTokens: float64(st.TrainedTokens), metricLR: st.LR,
		metricMicroBatches: float64(st.MicroBatches),
		metricMismatchMean: st.LogprobMismatchMean, metricMismatchMax: st.LogprobMismatchMax,
		metricSamplerLogprobTokens: float64(st.SamplerLogprobTokens), metricTISClipFraction: st.TISClipFraction,
	}
	if timings {
		vals[metricTokensPerS], vals[metricSeconds], vals[metricPeakMemory] = st.TokensPerS, st.Seconds, float64(st.PeakMemoryBytes)
	}
	has := st.written()
	for name := range vals {
		if !has(name) {
			delete(vals, name)
		}
	}
	if _, ok := vals[metricSamplerLogprobTokens]; !ok || st.SamplerLogprobTokens == 0 {
		delete(vals, metricMismatchMean)
		delete(vals, metricMismatchMax)
		delete(vals, metricTISClipFraction)
	}
	rows := make([]schemas.TrainMetric, 0, len(vals))
	for name, v := range vals {
		rows = append(rows, schemas.TrainMetric{Step: int64(st.Step), Name: name, Value: v})
	}
	sort.Slice(rows, func(a, b int) bool { return rows[a].Name < rows[b].Name })
	return rows
}

// written returns whether the step line carried a key with a value (not
// absent, not null); every key when m.Raw is nil (built in Go) or not a
// JSON object.
func (m StepMetrics) written() func(key string) bool {
	var line map[string]json.RawMessage
	if m.Raw == nil || json.Unmarshal(m.Raw, &line) != nil {
		return func(string) bool { return true }
	}
	return func(key string) bool {
		v, ok := line[key]
		return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	}
}

// TrainSummary reads one round's train_metrics rows (any order) into the
// report's training summary (docs/metrics.md "Report"): Trained from the
// step-0 "trained" row; Steps the number of inner steps (step >= 1) with
// a row; Loss, GradNorm, ClipFraction, KL and TrainedTokens the mean
// over the inner steps that have the metric; the log-prob mismatch,
// sampler_logprob_tokens and tis_clip_fraction from the first inner step
// that has them (the trainer measures them once and repeats them); the
// agent and zero-variance group counts from step 0, the share only when
// some group exists. A metric no row carries is NaN ("no data"), never 0.
// It never fails: a name it does not know is ignored.
func TrainSummary(rows []schemas.TrainMetric) *report.Training {
	type acc struct {
		sum       float64
		n         int
		firstStep int64
		first     float64
	}
	step0 := map[string]float64{}
	steps := map[int64]bool{}
	per := map[string]*acc{}
	for _, r := range rows {
		if r.Step <= 0 {
			step0[r.Name] = r.Value
			continue
		}
		steps[r.Step] = true
		a := per[r.Name]
		if a == nil {
			a = &acc{firstStep: r.Step, first: r.Value}
			per[r.Name] = a
		}
		a.sum += r.Value
		a.n++
		if r.Step < a.firstStep {
			a.firstStep, a.first = r.Step, r.Value
		}
	}
	mean := func(name string) float64 {
		if a := per[name]; a != nil {
			return a.sum / float64(a.n)
		}
		return math.NaN()
	}
	first := func(name string) float64 {
		if a := per[name]; a != nil {
			return a.first
		}
		return math.NaN()
	}
	at0 := func(name string) float64 {
		if v, ok := step0[name]; ok {
			return v
		}
		return math.NaN()
	}
	t := &report.Training{
		Trained: step0["trained"] == 1, Steps: len(steps),
		Loss: mean(metricLoss), GradNorm: mean(metricGradNorm), ClipFraction: mean(metricClipFraction), KL: mean(metricKL),
		TISClipFraction: first(metricTISClipFraction), TrainedTokens: mean(metricTrainedTokens),
		LogprobMismatchMean: first(metricMismatchMean), LogprobMismatchMax: first(metricMismatchMax),
		SamplerLogprobTokens: first(metricSamplerLogprobTokens),
		AgentGroups:          at0("agent_groups"), ZeroVarianceGroups: at0("zero_variance_groups"),
		ZeroVarianceShare: math.NaN(),
	}
	if t.AgentGroups > 0 && !math.IsNaN(t.ZeroVarianceGroups) {
		t.ZeroVarianceShare = t.ZeroVarianceGroups / t.AgentGroups
	}
	return t
}
