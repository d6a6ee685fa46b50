// Package roundmetrics is the metrics stage: the round-level numbers the
// paper reports (docs/method.md "Metrics", docs/metrics.md), as rows of the
// metrics table (name, skill, value), and their reading back as report
// summaries.
package roundmetrics

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/metrics"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// Stage is the metrics stage; it runs every round, last.
type Stage struct{}

// Name implements pipeline.Stage.
func (Stage) Name() string { return "metrics" }

// Outputs implements pipeline.Stage.
func (Stage) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "metrics"}} }

// Plan implements pipeline.Stage.
func (Stage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 {
		return nil, false
	}
	r := ri.Round
	ins := []pipeline.Input{
		{Table: "rollouts", Round: r}, {Table: "labels", Round: r}, {Table: "memory", Round: r, Optional: true},
		{Table: "pool", Round: r}, {Table: "train_batch", Round: r},
		{Table: "rollout_calls", Round: r, Optional: true}, {Table: "checkpoints", Round: r - 1, Optional: true},
	}
	if ri.Regeneration {
		ins = append(ins, pipeline.Input{Table: "slots", Round: r}, pipeline.Input{Table: "designs", Round: r}, pipeline.Input{Table: "environments", Round: r},
			pipeline.Input{Table: "design_calls", Round: r, Optional: true}, pipeline.Input{Table: "hint_calls", Round: r, Optional: true})
	}
	return ins, true
}

// ConfigSubset implements pipeline.Stage: the learnable band, and the
// embeddings of the diversity measure when they are not the default
// [tfidf] (so that runs made before metrics.embeddings existed keep their
// fingerprints).
func (Stage) ConfigSubset(c *config.Config) any {
	if slices.Equal(c.Metrics.Embeddings, []string{config.EmbeddingsTFIDF}) {
		return c.Label
	}
	return struct {
		Label      config.Label
		Embeddings []string
	}{c.Label, c.Metrics.Embeddings}
}

// Parts implements pipeline.Stage.Parts: the stage is one part, and its
// error is always nil.
func (Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Metric names written by the stage (docs/metrics.md defines each).
const (
	Slots             = "slots"
	DesignAttempts    = "design_attempts"
	RawValidity       = "raw_validity"
	Candidates        = "environments"
	Valid             = "valid"
	ValidityRate      = "validity_rate"
	Admitted          = "admitted"
	AdmissionRate     = "admission_rate"
	Played            = "played_environments"
	Plays             = "plays"
	PlayErrors        = "play_errors"
	LearnableFraction = "learnable_fraction"
	WinRate           = "win_rate"
	RegretMean        = "regret_mean"
	RegretP10         = "regret_p10"
	RegretP50         = "regret_p50"
	RegretP90         = "regret_p90"
	RewardLevels      = "reward_levels"
	VendiPerN         = "vendi_per_n"
	DomainsCovered    = "domains_covered"
	DomainCoverage    = "domain_coverage"
	MemorySize        = "memory_size"
	PoolSize          = "pool_size"
	TrainSamples      = "train_samples"
	SkillWinRate      = "skill_win_rate"
	OnPolicy          = "on_policy"
	PolicyCalls       = "policy_calls"
)

// Run implements pipeline.Stage.Run. A NaN or infinite value is left out
// of the metrics table rather than written. An empty pool is logged as a
// warning, not returned. Errors, returned unwrapped unless noted: reading
// an input (pipeline.ReadAll: the store's error, pipeline.ErrIntegrity,
// table.ErrCorrupt, a schema mismatch); and the engines/metrics function
// that refuses its input (metrics.ErrNonFinite, a win rate outside
// [0, 1], a band outside [0, 1] or reversed, an empty skill name, a failed
// Vendi eigendecomposition), the win-rate summary's wrapped as "win
// rates".
func (Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	r := env.Round.Round
	emit := emitFunc(func(name, skill string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		pipeline.Emit(out, schemas.Metrics, "metrics", schemas.Metric{Name: name, Skill: skill, Value: v})
	})
	plays, err := pipeline.ReadAll(ctx, env, schemas.Rollouts, "rollouts", r)
	if err != nil {
		return err
	}
	onPolicy, policyCalls, err := policyOf(ctx, env)
	if err != nil {
		return err
	}
	emit(OnPolicy, "", onPolicy)
	emit(PolicyCalls, "", float64(policyCalls))
	labels, err := pipeline.ReadAll(ctx, env, schemas.Labels, "labels", r)
	if err != nil {
		return err
	}
	emit(Plays, "", float64(len(plays)))
	perEnv := emitPlays(emit, plays)
	admitted, err := emitLabels(emit, env, labels)
	if err != nil {
		return err
	}
	if err := emitRewardLevels(emit, perEnv); err != nil {
		return err
	}
	if m := env.Manifest("memory", r); m != nil {
		emit(MemorySize, "", float64(m.Rows))
	} else {
		emit(MemorySize, "", 0)
	}
	pool := env.Manifest("pool", r).Rows
	if pool == 0 {
		// Every later table of the run will be empty too; say so rather
		// than let the round end quietly.
		slog.Warn("the pool is empty: no environment is admitted, so nothing is played or trained; the designs, environments and labels tables say why (error, reason, admitted)",
			"round", r, "labels", len(labels), "admitted", admitted)
	}
	emit(PoolSize, "", float64(pool))
	emit(TrainSamples, "", float64(env.Manifest("train_batch", r).Rows))
	if !env.Round.Regeneration {
		return nil
	}
	return emitRegeneration(ctx, env, emit, admitted)
}

// emitFunc writes one metrics row (name, skill, value); it exists so Run's
// parts below share Run's one writer.
type emitFunc func(name, skill string, v float64)

// emitPlays emits PlayErrors and returns each environment's step rewards
// per play, keyed by env id; split out of Run to keep it short.
func emitPlays(emit emitFunc, plays []schemas.Rollout) map[string][][]float64 {
	errs := 0
	perEnv := map[string][][]float64{}
	for _, p := range plays {
		if p.Error != "" {
			errs++
		}
		perEnv[p.EnvID] = append(perEnv[p.EnvID], p.StepRewards)
	}
	emit(PlayErrors, "", float64(errs))
	return perEnv
}

// emitLabels emits the label metrics (Played, Admitted, the win-rate and
// regret summaries) and returns how many labels were admitted; split out
// of Run to keep it short. Errors are Run's (engines/metrics).
func emitLabels(emit emitFunc, env *pipeline.Env, labels []schemas.Label) (int, error) {
	var winRates, regrets []float64
	var skills []string
	admitted := 0
	for _, l := range labels {
		if l.Admitted {
			admitted++
		}
		if !l.Valid || l.Plays == 0 {
			continue
		}
		winRates = append(winRates, l.WinRate)
		skills = append(skills, l.Skill)
		if l.Regret != nil {
			regrets = append(regrets, *l.Regret)
		}
	}
	emit(Played, "", float64(len(winRates)))
	emit(Admitted, "", float64(admitted))
	if len(winRates) > 0 {
		lf, err := metrics.LearnableFraction(winRates, env.Config.Label.BandLow, env.Config.Label.BandHigh)
		if err != nil {
			return 0, err
		}
		emit(LearnableFraction, "", lf)
		ws, err := metrics.Summarize(winRates)
		if err != nil {
			return 0, fmt.Errorf("win rates: %w", err)
		}
		emit(WinRate, "", ws.Mean)
		per, err := metrics.PerSkillWinRate(skills, winRates)
		if err != nil {
			return 0, err
		}
		for _, sk := range metrics.SortedKeys(per) {
			emit(SkillWinRate, sk, per[sk])
		}
	}
	if len(regrets) > 0 {
		rs, err := metrics.Summarize(regrets)
		if err != nil {
			return 0, err
		}
		emit(RegretMean, "", rs.Mean)
		emit(RegretP10, "", rs.P10)
		emit(RegretP50, "", rs.P50)
		emit(RegretP90, "", rs.P90)
	}
	return admitted, nil
}

// emitRewardLevels emits RewardLevels, the mean over environments (in id
// order) of metrics.RewardGranularity, when any environment was played;
// split out of Run to keep it short.
func emitRewardLevels(emit emitFunc, perEnv map[string][][]float64) error {
	if len(perEnv) == 0 {
		return nil
	}
	ids := make([]string, 0, len(perEnv))
	for id := range perEnv {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var levels float64
	for _, id := range ids {
		g, err := metrics.RewardGranularity(perEnv[id])
		if err != nil {
			return err
		}
		levels += float64(g)
	}
	emit(RewardLevels, "", levels/float64(len(ids)))
	return nil
}

// emitRegeneration emits the metrics of a regeneration round (slots,
// designs, validity, admission, diversity, domain coverage) given the
// round's admitted count; split out of Run to keep it short. Errors are
// Run's.
func emitRegeneration(ctx context.Context, env *pipeline.Env, emit emitFunc, admitted int) error {
	r := env.Round.Round
	slots, err := pipeline.ReadAll(ctx, env, schemas.Slots, "slots", r)
	if err != nil {
		return err
	}
	designs, err := pipeline.ReadAll(ctx, env, schemas.Designs, "designs", r)
	if err != nil {
		return err
	}
	envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", r)
	if err != nil {
		return err
	}
	emit(Slots, "", float64(len(slots)))
	emit(DesignAttempts, "", float64(len(designs)))
	passed := 0
	for _, d := range designs {
		if d.Error == "" && d.Source != "" {
			passed++
		}
	}
	if len(designs) > 0 {
		emit(RawValidity, "", float64(passed)/float64(len(designs)))
	}
	valid := 0
	var sources []string
	for _, e := range envs {
		if e.Valid {
			valid++
			sources = append(sources, e.Source)
		}
	}
	emit(Candidates, "", float64(len(envs)))
	emit(Valid, "", float64(valid))
	if len(slots) > 0 {
		emit(ValidityRate, "", float64(valid)/float64(len(slots)))
	}
	if valid > 0 {
		emit(AdmissionRate, "", float64(admitted)/float64(valid))
		if env.Config.Metrics.HasEmbedding(config.EmbeddingsTFIDF) {
			v, err := metrics.VendiPerN(sources, metrics.DefaultLSADim)
			if err != nil {
				return err
			}
			emit(VendiPerN, "", v)
		}
		if env.Config.Metrics.HasEmbedding(config.EmbeddingsSBERT) {
			v, err := metrics.VendiPerNSBERTOf(ctx, env.Config.Metrics.Python, sources)
			if err != nil {
				return err
			}
			emit(metrics.VendiPerNSBERT, "", v)
		}
	}
	var domains []string
	for _, s := range slots {
		domains = append(domains, s.Domains...)
	}
	cov := metrics.DomainCoverage(domains)
	emit(DomainsCovered, "", float64(len(cov.Covered)))
	emit(DomainCoverage, "", cov.Share)
	return nil
}

// Summary converts one round's metrics rows into a report summary; metrics
// a round does not have (validity off regeneration rounds) are NaN, and
// PolicyCalls is policy_calls, so that on_policy, which the table holds
// as 0 when no served model answered (policy_calls 0), reads as no data
// there. Training and Replies are left nil: they come from other tables
// (stages/grpo.TrainSummary, ReplyStats).
func Summary(round int, regen bool, rows []schemas.Metric) report.RoundSummary {
	get := map[string]float64{}
	per := map[string]float64{}
	for _, m := range rows {
		if m.Skill != "" {
			if m.Name == SkillWinRate {
				per[m.Skill] = m.Value
			}
			continue
		}
		get[m.Name] = m.Value
	}
	val := func(name string) float64 {
		if v, ok := get[name]; ok {
			return v
		}
		return math.NaN()
	}
	return report.RoundSummary{
		Round: round, Regeneration: regen,
		Environments: int(get[Candidates]), Valid: int(get[Valid]), Admitted: int(get[PoolSize]),
		ValidityRate: val(ValidityRate), LearnableFraction: val(LearnableFraction), WinRate: val(WinRate),
		RegretMean: val(RegretMean), RegretP10: val(RegretP10), RegretP50: val(RegretP50), RegretP90: val(RegretP90),
		VendiPerN: val(VendiPerN), DomainsCovered: int(get[DomainsCovered]), DomainCoverage: val(DomainCoverage),
		RewardLevels: val(RewardLevels), PerSkillWinRate: per,
		OffPolicy: get[PolicyCalls] > 0 && get[OnPolicy] == 0, PolicyCalls: int(get[PolicyCalls]),
	}
}

// policyOf returns on_policy (1 when every model call of the round that a
// served model answered, two or more roles' calls alike, was answered by
// the round's policy: its checkpoint_id is checkpoints(r-1)'s, or
// "base:<grpo.base_checkpoint>" in round 1, and it did not fail as a stale
// policy; 0 otherwise, and 0 when no call was answered by a served model,
// as with the procedural model or a fixed server) and the number of such
// calls (docs/design.md "The policy of a round"). Calls of the procedural
// model (checkpoint_id "procedural") are not policy calls; a calls table
// that is missing (a stage without model calls) holds none. Errors:
// reading the calls or checkpoints tables.
func policyOf(ctx context.Context, env *pipeline.Env) (float64, int, error) {
	r := env.Round.Round
	policy := "base:" + env.Config.GRPO.BaseCheckpoint
	if env.Has("checkpoints", r-1) {
		cks, err := pipeline.ReadAll(ctx, env, schemas.Checkpoints, "checkpoints", r-1)
		if err != nil {
			return 0, 0, err
		}
		if len(cks) == 1 {
			policy = cks[0].CheckpointID
		}
	}
	tables := []string{"rollout_calls"}
	if env.Round.Regeneration {
		tables = append(tables, "design_calls", "hint_calls")
	}
	n, on := 0, true
	for _, t := range tables {
		// File by file: a calls table holds every request and response
		// (38,400 plays' calls at 2,400 environments), and only two of its
		// fields are needed here.
		err := pipeline.ScanAll(ctx, env, schemas.LLMCalls, t, r, func(calls []schemas.LLMCall) error {
			for _, c := range calls {
				if c.CheckpointID == engine.ProceduralID {
					continue
				}
				n++
				if c.CheckpointID != policy || strings.Contains(c.Error, model.ErrStalePolicy.Error()) {
					on = false
				}
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	if n == 0 || !on {
		return 0, n, nil
	}
	return 1, n, nil
}
