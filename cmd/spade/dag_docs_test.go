package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/stages/all"
)

// TestDagDocs checks the hand-drawn stage DAGs against the round plan
// (pipeline.PlanRound, through stageGraph as spade dag airflow uses it)
// under the default config: docs/operations.md's chain must name the
// round-0 stages, every stage of a regeneration round once, star exactly
// the default sharded stages, and put every stage after each stage it
// depends on; stages/all's package comment must list the stages in the
// plan's order.
func TestDagDocs(t *testing.T) {
	cfg := config.Default()
	stages := all.Stages(&engine.Engines{Config: &cfg})
	nodes, err := stageGraph(stages, &cfg, defaultSharded)
	require.NoError(t, err)

	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(doc), "The order within a round is the stage DAG:\n\n")
	require.True(t, ok, "docs/operations.md lost its stage DAG drawing")
	lines := strings.Split(after, "\n")
	round0 := strings.Fields(strings.TrimPrefix(strings.TrimSpace(lines[0]), "[round 0]"))
	var wantRound0 []string
	for _, n := range nodes {
		if n.Round0 {
			wantRound0 = append(wantRound0, n.Stage)
		}
	}
	require.Equal(t, wantRound0, round0, "round-0 line: %s", lines[0])

	group := map[string]int{}
	var starred []string
	groups := strings.Split(strings.TrimSpace(lines[1]), " -> ")
	require.Equal(t, "seal", groups[len(groups)-1], lines[1])
	for i, g := range groups[:len(groups)-1] {
		for _, name := range strings.Split(g, ", ") {
			if s, ok := strings.CutSuffix(name, "*"); ok {
				name = s
				starred = append(starred, s)
			}
			_, dup := group[name]
			require.False(t, dup, "%s drawn twice", name)
			group[name] = i
		}
	}
	var sharded []string
	drawnStages := map[string]bool{}
	for _, n := range nodes {
		if n.Round0 {
			for _, a := range n.After {
				require.Contains(t, round0, a)
			}
			continue
		}
		i, ok := group[n.Stage]
		require.True(t, ok, "stage %s of a regeneration round is not drawn", n.Stage)
		for _, a := range n.After {
			if slices.Contains(round0, a) {
				continue
			}
			require.Less(t, group[a], i, "%s reads %s, so the drawing must put %s first", n.Stage, a, a)
		}
		if n.Sharded {
			sharded = append(sharded, n.Stage)
		}
		drawnStages[n.Stage] = true
	}
	for name := range group {
		require.True(t, drawnStages[name], "%s is drawn and does not run at a regeneration round", name)
	}
	require.Equal(t, sharded, starred, "the starred (sharded) stages")

	// stages/all's drawing: one "name(round)" line per stage, in the
	// order of the plan of a regeneration round.
	src, err := os.ReadFile("../../stages/all/all.go")
	require.NoError(t, err)
	var drawn []string
	for _, m := range regexp.MustCompile(`(?m)^//\t(\w+)\((?:0|r)\)`).FindAllStringSubmatch(string(src), -1) {
		drawn = append(drawn, m[1])
	}
	plan, err := pipeline.PlanRound(stages, &cfg, pipeline.NewRoundInfo("docs", 1+cfg.RegenerateEvery, &cfg))
	require.NoError(t, err)
	var order []string
	for _, ps := range plan.Stages {
		order = append(order, ps.Name)
	}
	require.Equal(t, order, drawn, "stages/all's drawing")
}
