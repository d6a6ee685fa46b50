// Package memory is the environment-memory stage (docs/method.md step 7):
// regret-scored, skill-tagged entries accumulate across regenerations in a
// FIFO of bounded capacity (paper: 200), and the designer prompts draw
// seeds of the active skill from it (engines/draw.Seeds).
package memory

import (
	"context"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spade-pipeline/spade/internal/textcut"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// ExcerptBytes bounds an entry's source excerpt shown in prompts, in
// bytes: the source is cut to its longest prefix of at most this many
// bytes that does not end inside a UTF-8 character (textcut.Prefix).
const ExcerptBytes = 1200

// Stage is the memory stage; on regeneration rounds it appends, otherwise
// it carries memory(r-1) forward by reference.
type Stage struct{}

// Name implements pipeline.Stage.
func (Stage) Name() string { return "memory" }

// Outputs implements pipeline.Stage.
func (Stage) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "memory"}} }

// Plan implements pipeline.Stage.
func (Stage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 {
		return nil, false
	}
	prev := pipeline.Input{Table: "memory", Round: ri.Round - 1, Optional: ri.Round == 1}
	if !ri.Regeneration {
		return []pipeline.Input{prev}, true
	}
	return []pipeline.Input{prev, {Table: "labels", Round: ri.Round}, {Table: "environments", Round: ri.Round}}, true
}

// ConfigSubset implements pipeline.Stage.
func (Stage) ConfigSubset(c *config.Config) any { return c.Memory }

// Parts implements pipeline.Stage.Parts: the stage is one part, and its
// error is always nil.
func (Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Append adds entries to mem (sorted by Seq), numbering them after the
// highest Seq, and evicts the oldest beyond capacity.
func Append(mem []schemas.MemoryEntry, add []schemas.MemoryEntry, capacity int) []schemas.MemoryEntry {
	next := int64(0)
	if len(mem) > 0 {
		next = mem[len(mem)-1].Seq + 1
	}
	out := slices.Clone(mem)
	for _, e := range add {
		e.Seq = next
		next++
		out = append(out, e)
	}
	if len(out) > capacity {
		out = out[len(out)-capacity:]
	}
	return out
}

var (
	familyRe     = regexp.MustCompile(`["']family["']\s*:\s*["']([A-Za-z0-9_\-]+)["']`)
	difficultyRe = regexp.MustCompile(`["']difficulty["']\s*:\s*([0-9]+)`)
	nameRe       = regexp.MustCompile(`(?m)^\s+name\s*(?::\s*str)?\s*=\s*["']([^"']*)["']`)
	docRe        = regexp.MustCompile(`(?s)class\s+\w+\([^)]*\):\s*\n\s*(?:"""|''')(.*?)(?:"""|''')`)
)

// Describe derives the family, difficulty and a one-line summary of an
// environment from its source: the procedural backend's marker when present,
// else the class's name attribute and docstring.
func Describe(source, skill string) (family string, difficulty int64, summary string) {
	if m := familyRe.FindStringSubmatch(source); m != nil {
		family = m[1]
	}
	if m := difficultyRe.FindStringSubmatch(source); m != nil {
		difficulty, _ = strconv.ParseInt(m[1], 10, 64)
	}
	name := ""
	if m := nameRe.FindStringSubmatch(source); m != nil {
		name = m[1]
	}
	if family == "" {
		family = name
	}
	doc := ""
	if m := docRe.FindStringSubmatch(source); m != nil {
		doc = strings.Join(strings.Fields(m[1]), " ")
		doc = textcut.Prefix(doc, 200)
	}
	summary = strings.TrimSpace(strings.Join([]string{name, "(" + skill + ")", doc}, " "))
	return family, difficulty, summary
}

// Run implements pipeline.Stage.Run. Between regenerations it references
// memory(r-1) (nothing when there is none) and returns nil without reading
// anything. On a regeneration round its only errors are those of reading
// memory(r-1), labels and environments (pipeline.ReadAll: the store's
// error, pipeline.ErrIntegrity, table.ErrCorrupt, a schema mismatch),
// returned unwrapped. A label whose environment is missing from
// environments is not an error: its entry gets an empty source.
func (Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	ri := env.Round
	if !ri.Regeneration {
		if m := env.Manifest("memory", ri.Round-1); m != nil {
			out.Reference("memory", m)
		}
		return nil
	}
	mem, err := pipeline.ReadAll(ctx, env, schemas.Memory, "memory", ri.Round-1)
	if err != nil {
		return err
	}
	labels, err := pipeline.ReadAll(ctx, env, schemas.Labels, "labels", ri.Round)
	if err != nil {
		return err
	}
	envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", ri.Round)
	if err != nil {
		return err
	}
	src := map[string]schemas.Environment{}
	for _, e := range envs {
		src[e.EnvID] = e
	}
	sort.Slice(labels, func(a, b int) bool { return labels[a].EnvID < labels[b].EnvID })
	var add []schemas.MemoryEntry
	for _, l := range labels {
		if !l.Valid || l.Regret == nil {
			continue
		}
		e := src[l.EnvID]
		family, diff, summary := Describe(e.Source, l.Skill)
		excerpt := textcut.Prefix(e.Source, ExcerptBytes)
		add = append(add, schemas.MemoryEntry{EnvID: l.EnvID, Skill: l.Skill, Family: family, Difficulty: diff, Regret: *l.Regret, WinRate: l.WinRate, AddedRound: int64(ri.Round), Summary: summary, Excerpt: excerpt})
	}
	out.Stat("memory_added", len(add))
	rows := Append(mem, add, env.Config.Memory.Capacity)
	if len(rows) == 0 {
		return nil
	}
	pipeline.Emit(out, schemas.Memory, "memory", rows...)
	return nil
}
