package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "spade.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestLoadLayers(t *testing.T) {
	p := write(t, "seed: 9\nsample:\n  slots: 12\n")
	c, src, err := Load(p, []string{"SPADE_ROLLOUT_GROUP_SIZE=4", "SPADE_SAMPLE_SKILLS=a, b,c", "SPADE_STORE=file://x", "HOME=/root"})
	require.NoError(t, err)
	require.EqualValues(t, 9, c.Seed)
	require.Equal(t, 12, c.Sample.Slots)
	require.Equal(t, 4, c.Rollout.GroupSize)
	require.Equal(t, []string{"a", "b", "c"}, c.Sample.Skills)
	require.Equal(t, p, src["sample.slots"])
	require.Equal(t, "SPADE_ROLLOUT_GROUP_SIZE", src["rollout.group_size"])
	require.Equal(t, "default", src["memory.capacity"])
	// Anchors, aliases and merge keys are YAML, and read as such.
	c, _, err = Load(write(t, "model: {timeout_s: &t 7}\nsandbox: {call_timeout_s: *t}\nrollout: &r {group_size: 3}\ndesign:\n  <<: {max_attempts: 2}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, 7.0, c.Sandbox.CallTimeoutS)
	require.Equal(t, 3, c.Rollout.GroupSize)
	require.Equal(t, 2, c.Design.MaxAttempts)
	empty, _, err := Load(write(t, ""), nil)
	require.NoError(t, err)
	require.Equal(t, Default(), empty)
}

// mergeBomb is 9 levels of merge lists of 9 aliases each: 9^9 settings.
var mergeBomb = func() string {
	var b strings.Builder
	b.WriteString("l0: &l0 {slots: 1}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "l%d: &l%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", i-1), 9), ","))
	}
	b.WriteString("sample:\n  <<: [" + strings.TrimSuffix(strings.Repeat("*l8,", 9), ",") + "]\n")
	return b.String()
}()

// emptyMergeBomb merges a list of n aliases of an empty mapping, n times
// over: it sets nothing, but took a minute to load at n = 16,000 with
// only the settings counted.
func emptyMergeBomb(n int) string {
	return "e: &e {}\nl1: &l1 {<<: [" + strings.TrimSuffix(strings.Repeat("*e,", n), ",") + "]}\n" +
		"sample: {<<: [" + strings.TrimSuffix(strings.Repeat("*l1,", n), ",") + "]}\n"
}

// manyUnknown is n unknown top-level keys.
func manyUnknown(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "unknown%d: 1\n", i)
	}
	return b.String()
}

func TestLoadErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml string
		env  []string
		want string
	}{
		"type":        {"sample:\n  slots: many\n", nil, "line 2"},
		"unknown key": {"sample:\n  slotz: 3\n", nil, `line 2: unknown setting "sample.slotz" (did you mean "sample.slots"? settings: see spade config show)`},
		// Unknown keys name the nearest setting or section: a misspelt
		// section, a setting in the wrong section, a top-level word.
		"misspelt section":  {"modle:\n  backend: openai\n", nil, `line 2: unknown setting "modle.backend" (did you mean "model.backend"? settings: see spade config show)`},
		"misspelt scalar":   {"modle: openai\n", nil, `line 1: unknown setting "modle" (did you mean "model"? settings: see spade config show)`},
		"wrong section":     {"model:\n  group_size: 8\n", nil, `line 2: unknown setting "model.group_size" (did you mean "rollout.group_size"? settings: see spade config show)`},
		"nothing near":      {"frobnicate: 1\n", nil, `line 1: unknown setting "frobnicate" (settings: see spade config show)`},
		"float for int":     {"seed: 1.5\n", nil, `line 1: seed wants an integer (got "1.5")`},
		"null value":        {"seed: null\n", nil, "line 1: seed has no value (null)"},
		"null section":      {"sample: null\n", nil, "line 1: sample has no value (null)"},
		"huge count":        {"sample:\n  slots: 1000000000\n", nil, "sample.slots must be > 0 and <= 1048576 (got 1000000000) ("},
		"relative python":   {"sandbox:\n  python: bin/python3\n", nil, `sandbox.python must be an absolute path (got "bin/python3")`},
		"url password":      {"model:\n  base_url: http://alice:PW@127.0.0.1:8000/v1\n", nil, "model.base_url must not carry credentials"},
		"url relative":      {"model:\n  base_url: 127.0.0.1:8000/v1\n", nil, "is not an absolute URL"},
		"key variable":      {"model:\n  api_key_env: SPADE_KEY\n", nil, `model.api_key_env "SPADE_KEY"`},
		"string for int":    {"seed: \"abc\"\n", nil, `line 1: seed wants an integer (got "abc")`},
		"value for section": {"sample: 5\n", nil, `line 1: sample is a section: write its settings under it, one per line (got "5")`},
		"quoted number":     {"sample: {slots: \"24\"}\n", nil, `line 1: sample.slots wants an integer (got "24")`},
		"number for bool":   {"sandbox: {strict: 1}\n", nil, `line 1: sandbox.strict wants true or false (got "1")`},
		"huge integer":      {"seed: 99999999999999999999\n", nil, `line 1: seed wants an integer (got "99999999999999999999")`},
		"list for text":     {"model: {name: [a]}\n", nil, "line 1: model.name wants a text value (got a list)"},
		"text for list":     {"sample: {skills: planning}\n", nil, `line 1: sample.skills wants a list, e.g. [a, b] (got "planning")`},
		"root list":         {"[1, 2]\n", nil, "line 1: the file must be a mapping of settings (key: value), not a list"},
		"two documents":     {"seed: 7\n---\nseed: 2\n", nil, "more than one YAML document"},
		"zero":              {"rollout:\n  group_size: 0\n", nil, "rollout.group_size must be > 0"},
		"negative":          {"workers: -2\n", nil, "workers must be >= 0"},
		"retries":           {"model:\n  max_retries: -1\n", nil, "model.max_retries must be >= 0"},
		"band":              {"label:\n  band_low: 0.9\n  band_high: 0.1\n", nil, "band"},
		"backend":           {"model:\n  backend: gpt\n", nil, "model.backend"},
		"openai no url":     {"model:\n  backend: openai\n", nil, "needs model.base_url"},
		"env int":           {"", []string{"SPADE_SEED=x"}, "SPADE_SEED"},
		"env unknown":       {"", []string{"SPADE_SAMPLE_SLOTZ=3"}, "environment variable SPADE_SAMPLE_SLOTZ names no setting (did you mean SPADE_SAMPLE_SLOTS? settings: see spade config show)"},
		// Range errors say where the value was set.
		"zero where":    {"seed: 1\nrollout:\n  group_size: 0\n", nil, "rollout.group_size must be > 0 and <= 1048576 (got 0) (" /* file */},
		"zero line":     {"seed: 1\nrollout:\n  group_size: 0\n", nil, "line 3)"},
		"env where":     {"", []string{"SPADE_ROLLOUT_MAX_TURNS=-1"}, "rollout.max_turns must be > 0 and <= 1048576 (got -1) (SPADE_ROLLOUT_MAX_TURNS)"},
		"env over file": {"rollout:\n  max_turns: 3\n", []string{"SPADE_ROLLOUT_MAX_TURNS=0"}, "(got 0) (SPADE_ROLLOUT_MAX_TURNS)"},
		// Every number must be finite: NaN and Inf used to reach Digest,
		// which panicked.
		"nan env":      {"", []string{"SPADE_GRPO_LR=NaN"}, "grpo.lr must be a finite number (got NaN) (SPADE_GRPO_LR)"},
		"inf env":      {"", []string{"SPADE_ROLLOUT_TEMPERATURE=Inf"}, "rollout.temperature must be a finite number (got +Inf)"},
		"nan yaml":     {"label:\n  band_low: .nan\n", nil, "label.band_low must be a finite number"},
		"inf timeout":  {"sandbox:\n  call_timeout_s: .inf\n", nil, "sandbox.call_timeout_s must be a finite number"},
		"huge timeout": {"grpo:\n  timeout_s: 1e300\n", nil, "grpo.timeout_s must be >= 0.001 and <= 1e+07 seconds"},
		// Below 1 ns a timeout became a zero time.Duration: the model
		// client's default of 5 minutes, the sandbox's 5 s.
		"tiny timeout":     {"model:\n  timeout_s: 1e-10\n", nil, "model.timeout_s must be >= 0.001 and <= 1e+07 seconds (got 1e-10) ("},
		"tiny env timeout": {"", []string{"SPADE_SANDBOX_CALL_TIMEOUT_S=0.0000000001"}, "sandbox.call_timeout_s must be >= 0.001"},
		// The trainer reads the base checkpoint at the end of round 1 only,
		// and the setting is pinned.
		"tiny seed":     {"grpo:\n  trainer: torch\n  base_checkpoint: tiny:x\n", nil, `grpo.base_checkpoint "tiny:x": want tiny:SEED`},
		"tiny negative": {"grpo:\n  trainer: torch\n  base_checkpoint: tiny:-1\n", nil, `grpo.base_checkpoint "tiny:-1"`},
		"tiny overflow": {"grpo:\n  trainer: command\n  command: [x]\n  base_checkpoint: tiny:18446744073709551616\n", nil, "want tiny:SEED with SEED an integer in [0, 2^64)"},
		"empty ckpt":    {"grpo:\n  trainer: torch\n  base_checkpoint: \"\"\n", nil, "grpo.base_checkpoint is empty"},
		"empty argv0":   {"grpo:\n  trainer: command\n  command: [\"\", x]\n", nil, "grpo.command[0], the program to run, is empty"},
		"empty skill":   {"model: {backend: openai, base_url: \"http://127.0.0.1:1/v1\", name: m}\nsample:\n  skills: [planning, \" \"]\n  active_skills: 1\n", nil, "sample.skills[1] is empty: each skill needs a name (" /* file */},
		"zero timeout":  {"grpo:\n  timeout_s: 0\n", nil, "grpo.timeout_s must be >= 0.001"},
		// Settings the grpo stage and the model client would refuse at the
		// end of a round are refused up front.
		"weight rule":  {"grpo:\n  weight_rule: bogus\n", nil, `grpo.weight_rule: designer weight rule "bogus"`},
		"weight fixed": {"grpo:\n  weight_rule: fixed:0\n", nil, "fixed:X with X a finite number > 0"},
		"eps":          {"grpo:\n  eps: -1\n", nil, "grpo.eps must be >= 0 (got -1)"},
		"lr":           {"grpo:\n  lr: 0\n", nil, "grpo.lr must be > 0 (got 0)"},
		"clip":         {"grpo:\n  clip_eps: -0.2\n", nil, "grpo.clip_eps must be > 0"},
		"kl":           {"grpo:\n  kl_beta: -2\n", nil, "grpo.kl_beta must be >= 0"},
		"max tokens":   {"hint:\n  max_tokens: -5\n", nil, "hint.max_tokens must be > 0 and <= 1048576 (got -5)"},
		"temperature":  {"design:\n  temperature: -3\n", nil, "design.temperature must be >= 0 (got -3)"},
		"top_p":        {"rollout:\n  top_p: 1.5\n", nil, "rollout.top_p must be in (0, 1], or 0 to send none (got 1.5)"},
		"format":       {"rollout:\n  action_format: json\n", nil, "rollout.action_format must be valid_actions, boxed, answer_tag or raw"},
		"extra body":   {"model:\n  extra_body: '[1]'\n", nil, "model.extra_body must be a JSON object"},
		"tool choice":  {"model:\n  tool_choice: any\n", nil, "model.tool_choice must be auto, required or none"},
		"reasoning":    {"grpo:\n  train_reasoning: all\n", nil, "grpo.train_reasoning must be generated or none"},
		"old key":      {"model:\n  temperature: 0.6\n", nil, `unknown setting "model.temperature"`},
		// The designer reward and its parameters (docs/regret.md "Other
		// formulas"): each error names the setting and where it was set.
		"reward kind":       {"label:\n  designer_reward: regret_blend\n", nil, `label.designer_reward must be regret, blend, learning_potential or solve_rate (got "regret_blend") (`},
		"reward kind env":   {"", []string{"SPADE_LABEL_DESIGNER_REWARD=Blend"}, `label.designer_reward must be regret, blend, learning_potential or solve_rate (got "Blend") (SPADE_LABEL_DESIGNER_REWARD)`},
		"reward kind empty": {"label:\n  designer_reward: \"\"\n", nil, `label.designer_reward must be regret, blend, learning_potential or solve_rate (got "")`},
		"blend weight":      {"label:\n  blend:\n    plateau_weight: -0.6\n", nil, "label.blend.plateau_weight must be >= 0 (got -0.6) ("},
		"blend weight line": {"label:\n  blend:\n    plateau_weight: -0.6\n", nil, "line 3)"},
		"regret weight":     {"label:\n  blend:\n    regret_weight: -1\n", nil, "label.blend.regret_weight must be >= 0 (got -1)"},
		"regret scale":      {"label:\n  blend:\n    regret_scale: 0\n", nil, "label.blend.regret_scale must be > 0 (got 0)"},
		"regret scale nan":  {"label:\n  blend:\n    regret_scale: .nan\n", nil, "label.blend.regret_scale must be a finite number"},
		"plateau ramp":      {"label:\n  blend:\n    plateau_ramp: 0\n", nil, "label.blend.plateau_ramp must be > 0 (got 0)"},
		"plateau order":     {"label:\n  blend:\n    plateau_low: 0.7\n    plateau_high: 0.5\n", nil, "label.blend.plateau_low and label.blend.plateau_high must satisfy 0 <= plateau_low <= plateau_high <= 1 (got plateau_low 0.7, plateau_high 0.5)"},
		"plateau over 1":    {"label:\n  blend:\n    plateau_high: 1.5\n", nil, "(got plateau_low 0.4, plateau_high 1.5)"},
		"regret floor":      {"label:\n  blend:\n    regret_floor: yes please\n", nil, `label.blend.regret_floor wants true or false`},
		"gamma order":       {"label:\n  learning_potential:\n    gamma_fast: 0.8\n    gamma_slow: 0.9\n", nil, "label.learning_potential.gamma_fast and label.learning_potential.gamma_slow must satisfy 0 < gamma_slow < gamma_fast <= 1 (got gamma_fast 0.8, gamma_slow 0.9)"},
		"gamma zero":        {"", []string{"SPADE_LABEL_LEARNING_POTENTIAL_GAMMA_SLOW=0"}, "(got gamma_fast 0.98, gamma_slow 0) (SPADE_LABEL_LEARNING_POTENTIAL_GAMMA_SLOW)"},
		"gamma over 1":      {"label:\n  learning_potential:\n    gamma_fast: 1.5\n", nil, "must satisfy 0 < gamma_slow < gamma_fast <= 1 (got gamma_fast 1.5, gamma_slow 0.85)"},
		"reward section":    {"label:\n  blend: 0.6\n", nil, "label.blend is a section"},
		"reward unknown":    {"label:\n  blend:\n    plateau_lo: 0.4\n", nil, `unknown setting "label.blend.plateau_lo" (did you mean "label.blend.plateau_low"?`},
		// An anchor that includes itself overflowed the stack (a fatal
		// error, not even a panic), and merges of merges expanded a few
		// hundred bytes into gigabytes of settings and error text.
		"self merge":    {"sample: &a\n  <<: *a\n", nil, "line 2: an alias refers to a mapping that contains it"},
		"self alias":    {"sample: &a\n  slots: 2\n  b: {c: *a}\n", nil, "line 3: an alias refers to a mapping that contains it"},
		"self in list":  {"sample: &a\n  <<: [*a]\n", nil, "line 2: an alias refers to a mapping that contains it"},
		"merge bomb":    {mergeBomb, nil, "aliases expand the file to more than 16384 settings"},
		"empty merges":  {emptyMergeBomb(200), nil, "aliases expand the file to more than 16384 settings (or merge-list entries)"},
		"many problems": {manyUnknown(31), nil, "; and 11 more"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Load(write(t, tc.yaml), tc.env)
			require.True(t, errors.Is(err, ErrInvalid), "%v", err)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, _, err := Load("/nonexistent/spade.yaml", nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, _, err = Load(t.TempDir(), nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "is a directory")
	// /dev/zero used to be read until memory ran out.
	_, _, err = Load("/dev/zero", nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "/dev/zero: the file is over 1048576 bytes")
}

func TestDigestIgnoresOperationalSettings(t *testing.T) {
	a := Default()
	b := Default()
	b.Workers, b.Model.Concurrency, b.Model.TimeoutS, b.GRPO.TimeoutS = 7, 3, 9, 10
	require.Equal(t, a.Digest(), b.Digest())
	b.Seed = 2
	require.NotEqual(t, a.Digest(), b.Digest())
	for _, k := range Operational {
		require.Contains(t, Keys(), k)
	}
}

// TestOperationalTagsLeaveTheDigest: every setting tagged
// spade:"operational" (the Operational list) can take another value
// without changing the digest, and a setting without the tag changes it.
func TestOperationalTagsLeaveTheDigest(t *testing.T) {
	def := Default()
	want := def.Digest()
	other := func(c *Config, key string) {
		t.Helper()
		val := "7"
		switch c.Get(key)[0] {
		case '"', 'n', '[':
			val = "/other"
		}
		require.NoError(t, setPath(c, key, val), key)
		require.NotEqual(t, def.Get(key), c.Get(key), key)
	}
	require.NotEmpty(t, Operational)
	for _, k := range Operational {
		c := Default()
		other(&c, k)
		require.Equal(t, want, c.Digest(), "%s is operational", k)
	}
	c := Default()
	other(&c, "model.name")
	require.NotEqual(t, want, c.Digest(), "model.name is pinned")
}

// TestNewSettingsKeepOldDigests: settings added after runs were pinned
// (sandbox.fork_episodes, sandbox.programs_per_sandbox) must not change the
// digest of a config that leaves them at their defaults, or every existing
// run would refuse to resume as "config changed".
func TestNewSettingsKeepOldDigests(t *testing.T) {
	c := Default()
	b, err := json.Marshal(c.Pinned())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"fork_episodes", "programs_per_sandbox"} {
		if strings.Contains(string(b), key) {
			t.Errorf("pinned JSON of the default config mentions %q: %s", key, b)
		}
	}
	c.Sandbox.ProgramsPerSandbox = 1 // operational: never in the digest
	if c.Digest() != Default().Digest() {
		t.Error("sandbox.programs_per_sandbox changed the digest")
	}
	c.Sandbox.ForkEpisodes = true // pinned: it can change results
	if c.Digest() == Default().Digest() {
		t.Error("sandbox.fork_episodes did not change the digest")
	}
}

// TestBaseCheckpointLabelWithoutTrainer: with grpo.trainer none nothing
// reads grpo.base_checkpoint (it only labels the base model's
// checkpoint_id), so any value loads, and runs pinned with one stay
// readable; with a trainer a bad tiny:SEED is refused (TestLoadErrors).
func TestBaseCheckpointLabelWithoutTrainer(t *testing.T) {
	for _, v := range []string{`"tiny:x"`, `""`} {
		c, _, err := Load(write(t, "grpo:\n  base_checkpoint: "+v+"\n"), nil)
		if err != nil {
			t.Fatalf("base_checkpoint %s with trainer none: %v", v, err)
		}
		if c.GRPO.Trainer != "none" {
			t.Fatalf("default trainer %q", c.GRPO.Trainer)
		}
	}
}

// TestLeadingZeros: an integer setting follows one rule in YAML and in the
// SPADE_* variables: decimal without leading zeros. YAML 1.1 would read
// slots: 024 as octal 20 while SPADE_SAMPLE_SLOTS=024 parsed as 24; both
// are refused now, naming the key, and plain decimals still load.
func TestLeadingZeros(t *testing.T) {
	for _, v := range []string{"024", "0o24", "0x18", "1_000", "00"} {
		_, _, err := Load(write(t, "sample:\n  slots: "+v+"\n"), nil)
		require.ErrorIs(t, err, ErrInvalid, v)
		require.Contains(t, err.Error(), "sample.slots wants a decimal integer without leading zeros", v)
		_, _, err = Load("", []string{"SPADE_SAMPLE_SLOTS=" + v})
		require.Error(t, err, v)
		require.Contains(t, err.Error(), "sample.slots wants a decimal integer without leading zeros", v)
	}
	_, _, err := Load(write(t, "label:\n  band_low: 010\n"), nil)
	require.ErrorContains(t, err, "label.band_low wants a decimal number without leading zeros")
	for _, v := range []string{"24", "0", "+24"} {
		c, _, err := Load(write(t, "sample:\n  slots: "+v+"\n"), nil)
		if v == "0" {
			require.ErrorContains(t, err, "sample.slots must be > 0")
			continue
		}
		require.NoError(t, err, v)
		require.Equal(t, 24, c.Sample.Slots)
		c, _, err = Load("", []string{"SPADE_SAMPLE_SLOTS=" + v})
		require.NoError(t, err, v)
		require.Equal(t, 24, c.Sample.Slots)
	}
}

// TestMakefileVariables: the Makefile exports SPADE_VENV and SPADE_CACHE
// to every recipe, make round included, which used to fail with
// "environment variable SPADE_CACHE names no setting".
func TestMakefileVariables(t *testing.T) {
	if _, _, err := Load("", []string{"SPADE_VENV=/opt/spade/venv", "SPADE_CACHE=/opt/spade/cache"}); err != nil {
		t.Fatalf("Load with the Makefile's variables: %v", err)
	}
}

// TestMakefileExportsAreCLIVars guards the Makefile: every SPADE_* variable
// it exports reaches every recipe (make round, make test), so Load must
// not reject it as a setting it does not know.
func TestMakefileExportsAreCLIVars(t *testing.T) {
	data, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "export" {
			continue
		}
		for _, name := range fields[1:] {
			if strings.HasPrefix(name, "SPADE_") {
				found++
				require.Contains(t, CLIVars, name, "the Makefile exports %s, which Load would reject", name)
			}
		}
	}
	require.Positive(t, found, "no SPADE_* export found in the Makefile")
}

// TestDesignerRewardSettings: every label.designer_reward kind loads with
// its parameters; the default (regret, and the public recipes' blend and
// learning-potential parameters) pins blank, so the digest of a default
// config is the one it had before the settings existed, and a run file
// without them reads them back as their defaults; any other value is
// pinned and changes the digest.
func TestDesignerRewardSettings(t *testing.T) {
	def := Default()
	b, err := json.Marshal(def.Pinned())
	require.NoError(t, err)
	for _, key := range []string{"designer_reward", "blend", "learning_potential", "designer_delay", "recipe", "ablation"} {
		require.NotContains(t, string(b), `"`+key+`"`, "the default config pins %s", key)
	}
	require.Equal(t, def.Label, def.Pinned().WithDefaults().Label, "pinned and read back, the default reward is the default")
	for _, kind := range []string{DesignerRewardRegret, DesignerRewardBlend, DesignerRewardLearningPotential, DesignerRewardSolveRate} {
		c, _, err := Load(write(t, "label:\n  designer_reward: "+kind+"\n"), nil)
		require.NoError(t, err, kind)
		require.Equal(t, kind, c.Label.DesignerRewardKind())
		if kind == DesignerRewardRegret {
			require.Equal(t, def.Digest(), c.Digest(), "regret written out is the default")
			continue
		}
		require.NotEqual(t, def.Digest(), c.Digest(), "%s must change the digest", kind)
		require.Equal(t, c.Label, c.Pinned().WithDefaults().Label, "%s survives the run file", kind)
	}
	// Parameters: each one pins on its own; the public solve-rate launcher's
	// blend (plateau weight 1, regret weight 0) loads.
	c, _, err := Load(write(t, "label:\n  designer_reward: blend\n  blend: {plateau_weight: 1, regret_weight: 0, regret_floor: false}\n  learning_potential: {gamma_fast: 1, gamma_slow: 0.5}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, Blend{PlateauWeight: 1, RegretWeight: 0, RegretScale: 0.15, RegretFloor: false, PlateauLow: 0.4, PlateauHigh: 0.6, PlateauRamp: 0.25}, c.Label.Blend)
	require.Equal(t, LearningPotential{GammaFast: 1, GammaSlow: 0.5}, c.Label.LearningPotential)
	require.Equal(t, c.Label, c.Pinned().WithDefaults().Label)
	one := Default()
	one.Label.Blend.RegretScale = 0.2
	require.NotEqual(t, def.Digest(), one.Digest(), "a blend parameter other than the default changes the digest")
}

// TestAttnImplementation: grpo.attn_implementation is pinned only when set
// (the default keeps old digests), takes the trainer's values, and a bad
// one is refused naming the key.
func TestAttnImplementation(t *testing.T) {
	b, err := json.Marshal(Default().Pinned())
	require.NoError(t, err)
	require.NotContains(t, string(b), "attn_implementation")
	for _, v := range strings.Fields(AttnImplementations) {
		c, _, err := Load(write(t, "grpo:\n  attn_implementation: "+v+"\n"), nil)
		require.NoError(t, err, v)
		require.Equal(t, v, c.GRPO.AttnImplementation)
		require.NotEqual(t, Default().Digest(), c.Digest(), "%s is pinned", v)
	}
	_, _, err = Load(write(t, "grpo:\n  attn_implementation: flash\n"), nil)
	require.ErrorContains(t, err, "grpo.attn_implementation must be empty (the trainer's default) or one of varlen_sdpa, sdpa")
}

// TestGRPOTrainerEnums: the trainer's enum settings added after runs were
// first pinned (grpo.loss_aggregation, grpo.agent_samples) pin blank at their defaults, so a
// default config keeps its digest and a run file without them reads them
// back as the defaults; written out, the default keeps the digest; every
// other value loads, changes the digest and survives the run file; a bad
// value is refused naming the key and the values.
func TestGRPOTrainerEnums(t *testing.T) {
	def := Default()
	b, err := json.Marshal(def.Pinned())
	require.NoError(t, err)
	for _, e := range []struct {
		key    string
		values []string
		got    func(GRPO) string
		bad    string
	}{
		{"loss_aggregation", LossAggregations, func(g GRPO) string { return g.LossAggregation }, "grpo.loss_aggregation must be token_mean or sample_mean"},
		{"agent_samples", AgentSampleKinds, func(g GRPO) string { return g.AgentSamples }, "grpo.agent_samples must be play or turn"},
	} {
		require.NotContains(t, string(b), `"`+e.key+`"`, "the default config pins grpo.%s", e.key)
		require.Equal(t, e.values[0], e.got(def.Pinned().WithDefaults().GRPO), "pinned and read back, the default is the default")
		for i, v := range e.values {
			c, _, err := Load(write(t, "grpo:\n  "+e.key+": "+v+"\n"), nil)
			require.NoError(t, err, v)
			require.Equal(t, v, e.got(c.GRPO))
			require.Equal(t, v, e.got(c.Pinned().WithDefaults().GRPO), "%s survives the run file", v)
			if i == 0 {
				require.Equal(t, def.Digest(), c.Digest(), "%s written out is the default", v)
			} else {
				require.NotEqual(t, def.Digest(), c.Digest(), "%s must change the digest", v)
			}
		}
		_, _, err := Load(write(t, "grpo:\n  "+e.key+": bogus\n"), nil)
		require.ErrorContains(t, err, e.bad)
	}
}

// TestDesignMode: design.mode designer (the default) pins blank, so a
// default config keeps the digest it had before the setting existed and
// a run file without it reads back as designer; fixed_pool loads (also
// from SPADE_DESIGN_MODE), changes the digest and survives the run file;
// another value is refused naming the key.
func TestDesignMode(t *testing.T) {
	def := Default()
	require.False(t, def.FixedPool())
	b, err := json.Marshal(def.Pinned())
	require.NoError(t, err)
	require.NotContains(t, string(b), `"mode"`, "the default config pins design.mode")
	require.Equal(t, DesignModeDesigner, def.Pinned().WithDefaults().Design.Mode)
	c, _, err := Load(write(t, "design:\n  mode: designer\n"), nil)
	require.NoError(t, err)
	require.Equal(t, def.Digest(), c.Digest(), "designer written out is the default")
	for _, src := range []struct {
		file string
		env  []string
	}{{"design:\n  mode: fixed_pool\n", nil}, {"", []string{"SPADE_DESIGN_MODE=fixed_pool"}}} {
		c, _, err := Load(write(t, src.file), src.env)
		require.NoError(t, err)
		require.True(t, c.FixedPool())
		require.NotEqual(t, def.Digest(), c.Digest())
		require.Equal(t, c.Design, c.Pinned().WithDefaults().Design)
	}
	_, _, err = Load(write(t, "design:\n  mode: fixed\n"), nil)
	require.ErrorContains(t, err, `design.mode must be designer or fixed_pool (got "fixed")`)
}
