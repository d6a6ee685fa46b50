package grpo

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/trainer"
)

var updateContract = flag.Bool("update", false, "rewrite "+TrainerConfigContract+" (TestTrainerConfigContract)")

// contractPath is TrainerConfigContract from this package's directory.
func contractPath() string {
	return filepath.Join("..", "..", filepath.FromSlash(TrainerConfigContract))
}

// TestTrainerConfigContract: the committed contract file is the config
// the stage writes for config.Default()'s round 1, byte for byte (the
// Python side's tests load it; -update rewrites it).
func TestTrainerConfigContract(t *testing.T) {
	cfg := config.Default()
	got, err := encodeTrainerConfig(trainerConfig(&cfg, pipeline.RoundInfo{Run: "contract", Round: 1, Seed: cfg.Seed}))
	require.NoError(t, err)
	if *updateContract {
		require.NoError(t, os.WriteFile(contractPath(), got, 0o644))
		return
	}
	want, err := os.ReadFile(contractPath())
	require.NoError(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date (TrainerConfig or the grpo defaults changed): run `go test ./stages/grpo -run TestTrainerConfigContract -update` and commit it\ngot:\n%s", TrainerConfigContract, got)
	}
}

// TestTrainerConfigWritesEveryField: each TrainerConfig field is one
// distinct snake_case key that is always written (the trainer refuses a
// missing key, so an omitempty would break the zero value).
func TestTrainerConfigWritesEveryField(t *testing.T) {
	typ := reflect.TypeFor[TrainerConfig]()
	seen := map[string]string{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		require.NotEmpty(t, tag, "field %s has no json tag", f.Name)
		require.NotContains(t, tag, ",", "field %s: the key is always written (no options)", f.Name)
		require.Regexp(t, `^[a-z][a-z0-9_]*$`, tag, "field %s", f.Name)
		require.NotContains(t, seen, tag, "fields %s and %s share a key", seen[tag], f.Name)
		seen[tag] = f.Name
	}
	b, err := encodeTrainerConfig(TrainerConfig{})
	require.NoError(t, err)
	var keys map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &keys))
	require.Len(t, keys, typ.NumField())
}

// TestTrainerConfigLoadsInPython: the embedded trainer's load_config
// accepts the contract file and refuses it with a key missing or an
// extra key, naming the key (exit status 2 at the command line).
func TestTrainerConfigLoadsInPython(t *testing.T) {
	py := pyenv.Require(t)
	dir := t.TempDir()
	require.NoError(t, trainer.WriteTo(filepath.Join(dir, "python")))
	body, err := os.ReadFile(contractPath())
	require.NoError(t, err)
	var full map[string]any
	require.NoError(t, json.Unmarshal(body, &full))
	load := func(name string, obj map[string]any) (string, error) {
		p := filepath.Join(dir, name+".json")
		b, err := json.Marshal(obj)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		cmd := exec.Command(py, "-c", "import sys\nfrom spade_trainer.config import load_config\nload_config(sys.argv[1])", p)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "python"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := load("full", full)
	require.NoError(t, err, out)

	missing := map[string]any{}
	for k, v := range full {
		if k != "micro_batch_size" {
			missing[k] = v
		}
	}
	out, err = load("missing", missing)
	require.Error(t, err)
	require.Contains(t, out, "missing field 'micro_batch_size'")

	extra := map[string]any{"clip_eps": 0.2}
	for k, v := range full {
		extra[k] = v
	}
	out, err = load("extra", extra)
	require.Error(t, err)
	require.True(t, strings.Contains(out, "unknown field 'clip_eps'"), out)
}
