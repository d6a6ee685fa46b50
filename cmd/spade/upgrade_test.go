package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// The store of testdata/upgrade/store: run upgradeRun of the ops config
// (testdata/ops/small.yaml), rounds 0 and 1 sealed by the build of commit
// d49f06f, from before the stages/ -> engines/ refactor and the config
// split; testdata/upgrade/README.md says how to make it again.
const (
	upgradeStore = "testdata/upgrade/store"
	upgradeRun   = "old"
	// upgradeCode is the code version d49f06f's build stamped into the
	// run file and every manifest of the store.
	upgradeCode = "v0.0.0-20261207043103-d49f06f6c47e"
)

// TestRunFromOlderBuildResumes: a run whose rounds 0 and 1 an older build
// (d49f06f) sealed is continued by this build. The old run verifies
// (spade verify, spade status), its pinned config is read (spade config
// show) and still hashes to the digest it records and to the digest of
// the same YAML loaded by this build (a renamed or dropped JSON field of
// pipeline/config fails here, naming the setting), and `spade round 2`
// commits round 2 with the golden digests of TestOps, the bytes an
// uninterrupted run of this build makes, on a seal chain that verifies.
// A round the old build left half done is not expected to resume (stage
// fingerprints include the code version: docs/format.md), so the store
// holds sealed rounds only.
func TestRunFromOlderBuildResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a round in a subprocess")
	}
	ctx := context.Background()
	o := newOpsEnv(t)
	// The checkout's files may be read-only: the run is continued in a copy.
	copyTree(t, upgradeStore, filepath.Join(o.dir, "runs"))
	local := openStore(t, o.store)
	golden := readGolden(t)
	run := []string{"--run", upgradeRun}

	// The store is what the old build left: rounds 0 and 1 sealed, with the
	// golden content, all of it written by d49f06f; round 2 not begun.
	rf, err := pipeline.ReadRunFile(ctx, local, upgradeRun)
	require.NoError(t, err)
	require.Equal(t, upgradeCode, rf.CodeVersion, "run file of the store: testdata/upgrade/README.md")
	require.Empty(t, compareDigests(onlyRounds(golden.Digests, 1), sealDigests(t, local, upgradeRun, 1)), "the old store's rounds 0 and 1 against %s", opsGoldenPath)
	requireCodeVersions(t, local, 0, 1, func(v string) bool { return v == upgradeCode }, "written by "+upgradeCode)
	_, err = pipeline.ReadSeal(ctx, local, upgradeRun, 2)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted)
	round2, err := os.ReadDir(filepath.Join(o.dir, "runs", upgradeRun, "round=000002"))
	require.True(t, os.IsNotExist(err), "round 2 of the store is begun: %v", round2)

	t.Run("pinned config", func(t *testing.T) { upgradePinnedConfig(t, o, rf) })

	t.Run("old run verifies", func(t *testing.T) { upgradeOldRunVerifies(ctx, t, o, local, run) })

	t.Run("config show reads the old run file", func(t *testing.T) { upgradeConfigShow(t, o, rf, run) })

	// This build continues the run with the next round.
	out := o.must(t, nil, append(run, "round", "2")...)
	require.Contains(t, out, "round 2 of run old committed")
	require.Contains(t, out, "already committed []")

	t.Run("round 2 as an uninterrupted run makes it", func(t *testing.T) {
		got := sealDigests(t, local, upgradeRun, 2)
		diffs := compareDigests(golden.Digests, got)
		require.Empty(t, diffs, "round 2 of the run the old build began, against %s (an uninterrupted run of this build, TestOps):\n%s", opsGoldenPath, strings.Join(diffs, "\n"))
		require.NoError(t, pipeline.VerifyChain(ctx, local, upgradeRun, 2))
		// Rounds 0 and 1 are the old build's, untouched; round 2 this build's.
		requireCodeVersions(t, local, 0, 1, func(v string) bool { return v == upgradeCode }, "written by "+upgradeCode)
		requireCodeVersions(t, local, 2, 2, func(v string) bool { return v != upgradeCode }, "written by this build")

		var v struct {
			OK   bool                     `json:"ok"`
			Runs []*pipeline.VerifyReport `json:"runs"`
		}
		require.NoError(t, json.Unmarshal([]byte(o.must(t, nil, append(run, "verify", "--json")...)), &v))
		require.True(t, v.OK)
		require.Equal(t, []int{0, 1, 2, 3}, v.Runs[0].Rounds)
		require.Equal(t, 3, v.Runs[0].Sealed)
		require.Empty(t, v.Runs[0].Damage)
		require.Contains(t, o.must(t, nil, append(run, "status")...), "next round: 3")
		// Every row of rounds 0..2 decodes through its manifest.
		require.Equal(t, len(golden.Digests), readAllTables(t, local, upgradeRun, 2))
	})
}

// upgradePinnedConfig checks that the old run file decodes and verifies
// under this build, and that the ops config still has its digest.
func upgradePinnedConfig(t *testing.T, o *opsEnv, rf *pipeline.RunFile) {
	// Every setting the old build wrote is one this build reads: an
	// unknown key is dropped by the decoder (the setting reads as its
	// default) and the run's digest stops verifying.
	raw, err := os.ReadFile(filepath.Join(upgradeStore, upgradeRun, "_RUN.json"))
	require.NoError(t, err)
	var old struct {
		Config map[string]any `json:"config"`
	}
	require.NoError(t, json.Unmarshal(raw, &old))
	b, err := json.Marshal(rf.Config)
	require.NoError(t, err)
	var now map[string]any
	require.NoError(t, json.Unmarshal(b, &now))
	require.Empty(t, missingKeys(old.Config, now, ""),
		"settings of the old _RUN.json that this build's config.Config does not decode (a JSON tag renamed or a field removed in pipeline/config): runs pinned before the change stop verifying")
	require.NoError(t, rf.VerifyConfig(), "the old run file's config under this build's config package")
	cfg, _, err := config.Load(o.cfg, nil)
	require.NoError(t, err)
	require.Equal(t, rf.ConfigDigest, cfg.Digest(),
		"%s loaded by this build no longer has the digest the old build pinned; settings that differ: %s", o.cfg, settingsDiff(rf.Config, cfg))
}

// upgradeOldRunVerifies checks spade verify and spade status on the
// old run before this build adds a round.
func upgradeOldRunVerifies(ctx context.Context, t *testing.T, o *opsEnv, local storage.Store, run []string) {
	var v struct {
		OK   bool                     `json:"ok"`
		Runs []*pipeline.VerifyReport `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(o.must(t, nil, append(run, "verify", "--json")...)), &v))
	require.True(t, v.OK)
	require.Len(t, v.Runs, 1)
	require.Equal(t, []int{0, 1, 2}, v.Runs[0].Rounds)
	require.Equal(t, 2, v.Runs[0].Sealed)
	require.Empty(t, v.Runs[0].Damage)

	var st struct {
		Next   int `json:"next_round"`
		Rounds []struct {
			Round  int    `json:"round"`
			Sealed bool   `json:"sealed"`
			ID     string `json:"round_id"`
		} `json:"rounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(o.must(t, nil, append(run, "status", "--json")...)), &st))
	require.Equal(t, 2, st.Next)
	require.Len(t, st.Rounds, 2)
	for r, s := range st.Rounds {
		seal, err := pipeline.ReadSeal(ctx, local, upgradeRun, r)
		require.NoError(t, err)
		require.Equal(t, r, s.Round)
		require.True(t, s.Sealed)
		require.Equal(t, seal.Digest(), s.ID)
	}
}

// upgradeConfigShow checks that spade config show reads the old run
// file: its digest, and the pinned values of small.yaml.
func upgradeConfigShow(t *testing.T, o *opsEnv, rf *pipeline.RunFile, run []string) {
	out := o.must(t, nil, append(run, "config", "show")...)
	require.Contains(t, out, "# config digest = "+rf.ConfigDigest+"\n")
	require.Contains(t, out, "# the pinned config of run old (old/_RUN.json)")
	require.NotContains(t, out, "differs from it", "the ops config no longer matches the run it pinned")
	var rows []struct {
		Key    string `json:"key"`
		Value  string `json:"value"`
		Source string `json:"source"`
	}
	require.NoError(t, json.Unmarshal([]byte(o.must(t, nil, append(run, "config", "show", "--json")...)), &rows))
	got := map[string]string{}
	for _, r := range rows {
		require.Equal(t, "run", r.Source, r.Key)
		got[r.Key] = r.Value
	}
	// small.yaml's settings, and defaults of the old build, as pinned.
	for k, v := range map[string]string{
		"seed": "11", "workers": "2", "regenerate_every": "2", "sample.slots": "6",
		"design.slots_per_part": "1", "rollout.group_size": "4", "rollout.envs_per_part": "1",
		"rollout.max_turns": "15", "model.backend": `"procedural"`, "label.band_low": "0.2",
	} {
		require.Equal(t, v, got[k], k)
	}
}

// requireCodeVersions requires ok of the code version of every manifest
// that rounds lo..hi of the upgrade run's seals list (tables carried
// forward by reference included: their manifests are the round's own).
func requireCodeVersions(t *testing.T, s storage.Store, lo, hi int, ok func(string) bool, what string) {
	t.Helper()
	ctx := context.Background()
	for r := lo; r <= hi; r++ {
		seal, err := pipeline.ReadSeal(ctx, s, upgradeRun, r)
		require.NoError(t, err)
		require.NotEmpty(t, seal.Manifests)
		for table, key := range seal.Manifests {
			m, err := pipeline.ReadManifest(ctx, s, key)
			require.NoError(t, err)
			require.True(t, ok(m.CodeVersion), "round %d %s: code version %q, want one %s", r, table, m.CodeVersion, what)
		}
	}
}

// missingKeys lists the key paths of old (a decoded JSON object) that now
// lacks, sorted.
func missingKeys(old, now map[string]any, prefix string) []string {
	var out []string
	for k, v := range old {
		n, found := now[k]
		switch {
		case !found:
			out = append(out, prefix+k)
		default:
			if om, isMap := v.(map[string]any); isMap {
				if nm, isMap := n.(map[string]any); isMap {
					out = append(out, missingKeys(om, nm, prefix+k+".")...)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// settingsDiff names the pinned settings whose values differ between a
// and b.
func settingsDiff(a, b config.Config) string {
	a, b = a.Pinned(), b.Pinned()
	var diff []string
	for _, k := range config.Keys() {
		if a.Get(k) != b.Get(k) {
			diff = append(diff, fmt.Sprintf("%s %s -> %s", k, a.Get(k), b.Get(k)))
		}
	}
	if len(diff) == 0 {
		return "none by config.Keys (a field outside them, or a JSON tag, changed)"
	}
	return strings.Join(diff, ", ")
}
