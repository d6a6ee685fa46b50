// Package sample is the corpus-sampling stage (docs/method.md steps 1-2): for a
// regeneration it lays out the environment slots, each with its skill from
// the round-robin curriculum, its setting and prompt kind, and grounding
// documents drawn deterministically from (run seed, round).
package sample

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// GameKinds are the prompt kinds of the game setting, cycled over a
// skill's slots (docs/method.md step 3: single-turn reasoning, generic
// multi-turn game, corpus-grounded multi-turn).
var GameKinds = []string{"game", "grounded", "reasoning"}

// Stage is the sample stage. It runs on regeneration rounds.
type Stage struct{}

// Name implements pipeline.Stage.
func (Stage) Name() string { return "sample" }

// Outputs implements pipeline.Stage.
func (Stage) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "slots"}} }

// Plan implements pipeline.Stage: reads the run's corpus (round 0).
func (Stage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return []pipeline.Input{{Table: "corpus", Round: 0}}, ri.Round >= 1 && ri.Regeneration
}

// ConfigSubset implements pipeline.Stage: the sample settings, and
// ablation.no_grounding when set.
func (Stage) ConfigSubset(c *config.Config) any {
	if !c.Ablation.NoGrounding {
		return c.Sample
	}
	return struct {
		Sample      config.Sample
		NoGrounding bool
	}{c.Sample, true}
}

// Parts implements pipeline.Stage.Parts: slots are cheap; one part. Its
// error is always nil.
func (Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// ActiveSkills returns the skills active in regeneration g: a window of
// `active` consecutive skills starting at g*active (mod n), so every skill is
// active equally often and consecutive regenerations differ (round-robin).
func ActiveSkills(skills []string, active, g int) []string {
	n := len(skills)
	out := make([]string, 0, active)
	for j := 0; j < active; j++ {
		out = append(out, skills[(g*active+j)%n])
	}
	return out
}

// SlotLayout returns the skill, setting and kind of slot i of a
// regeneration: slots cycle through the active skills; with setting
// "mixed", every tool_use_every-th slot is tool use. When the number of
// active skills A and tool_use_every T share a factor, the skill cycle
// shifts by one every lcm(A, T) slots: otherwise the tool-use slots would
// always land on the same skills (A = 2, T = 4: only the second). With A
// and T coprime (the defaults, 3 and 4) nothing shifts.
func SlotLayout(c *config.Sample, active []string, i int) (skill, setting, kind string) {
	a := len(active)
	shift := 0
	if t := c.ToolUseEvery; c.Setting == config.SettingMixed && t > 0 && gcd(a, t) > 1 {
		shift = i / (a / gcd(a, t) * t)
	}
	skill = active[(i+shift)%a]
	setting = c.Setting
	if setting == config.SettingMixed {
		setting = "game"
		if i%c.ToolUseEvery == c.ToolUseEvery-1 {
			setting = "tool_use"
		}
	}
	if setting == "tool_use" {
		return skill, setting, "tooluse"
	}
	return skill, setting, GameKinds[(i/len(active))%len(GameKinds)]
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// drawRows picks k row indexes from [0, n): without replacement while k <=
// n (Floyd's algorithm, O(k) memory), then cycling.
func drawRows(rng *rand.Rand, n, k int64) []int64 {
	out := make([]int64, 0, k)
	m := min(k, n)
	chosen := make(map[int64]bool, m)
	var picked []int64
	for j := n - m; j < n; j++ {
		t := rng.Int64N(j + 1)
		if chosen[t] {
			t = j
		}
		chosen[t] = true
		picked = append(picked, t)
	}
	rng.Shuffle(len(picked), func(a, b int) { picked[a], picked[b] = picked[b], picked[a] })
	for int64(len(out)) < k {
		out = append(out, picked[int64(len(out))%m])
	}
	return out
}

type docRef struct {
	DocID  string `parquet:"doc_id"`
	Domain string `parquet:"domain"`
}

// Run implements pipeline.Stage.Run. It reads only the doc_id and domain
// columns of the sampled rows. Errors: an empty corpus (naming the run),
// before anything is read; and pipeline.ReadRowsAt's (a row outside the
// corpus, pipeline.ErrIntegrity, an open, seek or decode failure naming
// the part file) wrapped as "read sampled corpus rows". The sampled rows
// are not checked against the part files' sha256.
func (Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	c := env.Config.Sample
	m := env.Manifest("corpus", 0)
	if m.Rows == 0 {
		return fmt.Errorf("corpus of run %s is empty", env.Round.Run)
	}
	ri := env.Round
	rng := rand.New(rand.NewPCG(uint64(pipeline.DeriveSeed(ri.Seed, "sample", ri.Round)), 0x5ade))
	perSlot := c.DocsPerSlot
	if env.Config.Ablation.NoGrounding {
		// The no-corpus ablation: no documents, and the generic game in
		// place of the corpus-grounded prompt (public code: an empty
		// CORPUS_FILE selects the non-corpus template).
		perSlot = 0
	}
	rows := drawRows(rng, m.Rows, int64(c.Slots*perSlot))
	refs, err := pipeline.ReadRowsAt[docRef](ctx, env.Store(), m, rows)
	if err != nil {
		return fmt.Errorf("read sampled corpus rows: %w", err)
	}
	active := ActiveSkills(c.Skills, c.ActiveSkills, ri.RegenIndex)
	for i := 0; i < c.Slots; i++ {
		skill, setting, kind := SlotLayout(&c, active, i)
		if perSlot == 0 && kind == "grounded" {
			kind = "game"
		}
		s := schemas.Slot{
			SlotID: fmt.Sprintf("r%06d-s%04d", ri.Round, i), Regeneration: int64(ri.RegenIndex),
			Index: int64(i), Skill: skill, Setting: setting, Kind: kind,
			Seed: pipeline.DeriveSeed(ri.Seed, "slot", ri.Round, i),
		}
		for d := 0; d < perSlot; d++ {
			j := i*perSlot + d
			s.DocIDs = append(s.DocIDs, refs[j].DocID)
			s.Domains = append(s.Domains, refs[j].Domain)
			s.DocRows = append(s.DocRows, rows[j])
		}
		pipeline.Emit(out, schemas.Slots, "slots", s)
	}
	return nil
}
