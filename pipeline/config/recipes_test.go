package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// recipeDir is the repository's configs/ directory: the public recipes,
// the ablations and spade's default as files (docs/recipes.md).
const recipeDir = "../../configs"

// publicGameSkills are the public games launchers' DEFAULT_SPADE_SKILLS,
// in their order; publicToolSkills the tool-use launcher's --spade-skills
// (docs/method.md step 2, "What the public code does in practice").
var (
	publicGameSkills = []string{"Mathematical_Reasoning", "Logical_Deduction", "Spatial_Reasoning", "Pattern_Recognition", "Optimization", "Causal_Inference"}
	publicToolSkills = []string{"API_Orchestration", "Data_Retrieval", "State_Modification", "Error_Recovery", "Tool_Selection", "Multi-Step_Workflows"}
)

// sectionLine is a line that opens a section (a key with no value).
var sectionLine = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*:\s*$`)

// TestRecipeFiles loads every configs/*.yaml with the config loader, as
// `spade --config configs/NAME.yaml` does (SPADE_* variables ignored), and
// fails naming the file: each must load, name itself (recipe = its base
// name), give every value a comment naming its source, and the public
// recipes must hold what docs/recipes.md says of them.
func TestRecipeFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(recipeDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	for _, want := range []string{"default", "games-4b", "games-8b", "games-30b-a3b", "tool-use-8b", "tool-use-30b-a3b"} {
		if !slices.Contains(names, want) {
			t.Errorf("configs/%s.yaml is missing (have %v)", want, names)
		}
	}
	def := Default()
	for i, f := range files {
		name := names[i]
		file := "configs/" + name + ".yaml"
		t.Run(name, func(t *testing.T) {
			c, _, err := Load(f, nil)
			if err != nil {
				t.Fatalf("%s does not load: %v", file, err)
			}
			if c.Recipe != name {
				t.Errorf("%s: recipe is %q, want its base name %q", file, c.Recipe, name)
			}
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(body), "docs/method.md") {
				t.Errorf("%s: its comments name no section of docs/method.md", file)
			}
			for n, line := range strings.Split(string(body), "\n") {
				s := strings.TrimSpace(line)
				if s == "" || strings.HasPrefix(s, "#") || strings.HasPrefix(s, "- ") || sectionLine.MatchString(s) {
					continue
				}
				if !strings.Contains(line, " # ") {
					t.Errorf("%s line %d: %q has no comment naming its source", file, n+1, s)
				}
			}
			switch {
			case name == "default":
				// Running with the file is running with no --config, but
				// for the recipe's name.
				c.Recipe = ""
				if c.Digest() != def.Digest() {
					t.Errorf("%s is not the embedded default (digest %s, want %s)", file, c.Digest(), def.Digest())
				}
			case strings.HasPrefix(name, "games-"), strings.HasPrefix(name, "tool-use-"):
				checkPublicRecipe(t, file, c, strings.HasPrefix(name, "tool-use-"))
			}
		})
	}
}

// checkPublicRecipe checks what every public recipe shares (docs/method.md
// "What the public code does in practice"): the blend designer reward
// with the recipes' parameters, 24 environments, 16 plays per arm, the
// trainer's settings; games with the six public skills, k = 4 and a
// designer delay of 4; tool use with its own six skills, k = 8, delay 8.
func checkPublicRecipe(t *testing.T, file string, c Config, toolUse bool) {
	t.Helper()
	errorf := func(format string, args ...any) { t.Errorf(file+": "+format, args...) }
	if c.Label.DesignerRewardKind() != DesignerRewardBlend || c.Label.Blend != DefaultBlend() || c.Label.LearningPotential != DefaultLearningPotential() {
		errorf("designer reward %q %+v %+v, want the public blend", c.Label.DesignerReward, c.Label.Blend, c.Label.LearningPotential)
	}
	if c.Sample.Slots != 24 || c.Rollout.GroupSize != 16 || c.Rollout.MaxTurns != 25 || c.Sample.ActiveSkills != 3 {
		errorf("slots %d, group size %d, max turns %d, active skills %d; want 24, 16, 25, 3", c.Sample.Slots, c.Rollout.GroupSize, c.Rollout.MaxTurns, c.Sample.ActiveSkills)
	}
	g := c.GRPO
	if g.LR != 1e-6 || g.ClipEps != 0.2 || g.ClipEpsHigh != 0.28 || g.AdamBeta2 != 0.98 || g.WeightDecay != 0.1 || g.Trainer != "torch" || g.TISCap != 2 {
		errorf("grpo lr %g clip %g/%g beta2 %g weight decay %g trainer %q tis_cap %g; want 1e-6, 0.2/0.28, 0.98, 0.1, torch, 2 (--use-tis)", g.LR, g.ClipEps, g.ClipEpsHigh, g.AdamBeta2, g.WeightDecay, g.Trainer, g.TISCap)
	}
	skills, setting, k := publicGameSkills, "game", 4
	if toolUse {
		skills, setting, k = publicToolSkills, "tool_use", 8
	}
	if !slices.Equal(c.Sample.Skills, skills) || c.Sample.Setting != setting {
		errorf("skills %v, setting %q; want %v, %q", c.Sample.Skills, c.Sample.Setting, skills, setting)
	}
	if c.RegenerateEvery != k || g.DesignerDelay != k {
		errorf("regenerate_every %d, designer_delay %d; want k = %d for both", c.RegenerateEvery, g.DesignerDelay, k)
	}
}
