package config

import (
	"encoding/json"
	"errors"
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
	empty, _, err := Load(write(t, ""), nil)
	require.NoError(t, err)
	require.Equal(t, Default(), empty)
}

func TestLoadErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml string
		env  []string
		want string
	}{
		"type":          {"sample:\n  slots: many\n", nil, "line 2"},
		"unknown key":   {"sample:\n  slotz: 3\n", nil, "field slotz not found"},
		"zero":          {"rollout:\n  group_size: 0\n", nil, "rollout.group_size must be > 0"},
		"negative":      {"workers: -2\n", nil, "workers must be >= 0"},
		"retries":       {"model:\n  max_retries: -1\n", nil, "model.max_retries must be >= 0"},
		"band":          {"label:\n  band_low: 0.9\n  band_high: 0.1\n", nil, "band"},
		"backend":       {"model:\n  backend: gpt\n", nil, "model.backend"},
		"openai no url": {"model:\n  backend: openai\n", nil, "needs model.base_url"},
		"env int":       {"", []string{"SPADE_SEED=x"}, "SPADE_SEED"},
		"env unknown":   {"", []string{"SPADE_SAMPLE_SLOTZ=3"}, "names no setting"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Load(write(t, tc.yaml), tc.env)
			require.True(t, errors.Is(err, ErrInvalid), "%v", err)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, _, err := Load("/nonexistent/spade.yaml", nil)
	require.ErrorIs(t, err, ErrInvalid)
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
