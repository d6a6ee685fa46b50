package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/internal/pyenv"
)

// wireServerCommand is the argv of the trainer tests' vLLM-wire server
// (trainer/tests/wire_server.py: SmolLM2 sampled with a KV cache,
// answering with token_ids, logprobs.content and prompt_token_ids as
// vLLM's chat completions do; a test server, so not embedded in the
// binary), under env(1) with the environment it needs, and with
// {checkpoint}, {port} and {served_model} left for spade to fill.
func wireServerCommand(t *testing.T, py string) []string {
	src, err := filepath.Abs(filepath.Join("..", "..", "trainer", "tests"))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(src, "wire_server.py"))
	return []string{"env", "PYTHONPATH=" + src, "HF_HUB_OFFLINE=1", "OMP_NUM_THREADS=1",
		py, "-m", "wire_server", "{checkpoint}", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", "{served_model}"}
}

// yamlList writes argv as a YAML flow sequence of quoted strings.
func yamlList(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestTrainsOnSampledTokens is issue 25's closing check, end to end in
// Go: round 1's agent calls are answered by a server (managed by spade)
// that returns the sampled token ids and log-probs for SmolLM2; every
// trained turn of train_batch carries them, the trainer counts exactly
// those tokens as sampler log-prob tokens, and its first step's mismatch
// is about 0 (server and trainer hold the same weights). A fork's round 2
// is played against a server still holding the previous checkpoint (the
// base) while the trainer starts from checkpoint 1: the mismatch is
// clearly above 0 and the stage warns.
//
// The band [0, 1] admits the environment whatever SmolLM2 wins, and the
// designer delay keeps designer samples (the procedural designer's, with
// no token ids) out of both rounds' batches.
func TestTrainsOnSampledTokens(t *testing.T) {
	py := pyenv.Require(t, "torch", "transformers")
	ckpt := pyenv.RequireModel(t, "smollm2-135m-instruct")
	argv := wireServerCommand(t, py)
	dir := t.TempDir()
	cache := filepath.Join(t.TempDir(), "cache")
	common := fmt.Sprintf(`seed: 5
workers: 1
regenerate_every: 1
sample: {slots: 1}
design: {slots_per_part: 1}
rollout: {group_size: 2, max_turns: 1, temperature: 1, max_tokens: 16}
label: {band_low: 0, band_high: 1}
grpo: {designer_delay: 5, trainer: torch, python: %s, base_checkpoint: %s, max_seq_len: 512, lr: 0.05, weight_decay: 0.5, mismatch_warn: 0.02}
`, py, ckpt)
	managed := writeConfig(t, dir, common+fmt.Sprintf(`model:
  backend: openai
  serving: managed
  serve_command: %s
  serve_ready_timeout_s: 300
  checkpoint_cache: %s
  roles:
    designer: {backend: procedural}
    hint: {backend: procedural}
`, yamlList(argv), cache))
	r := spade(t, dir, nil, "--config", managed, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)

	// Every trained assistant turn carries the sampled ids and one
	// log-prob per id.
	require.Equal(t, "0", sqlCSV(t, dir, managed, `select count(*) from (select unnest(messages) as m from train_batch where round = 1)
		where m.role = 'assistant' and (coalesce(len(m.completion_token_ids), 0) = 0 or len(m.completion_logprobs) <> len(m.completion_token_ids)
		or coalesce(len(m.prompt_token_ids), 0) = 0)`))
	samples := sqlCSV(t, dir, managed, "select count(*) from train_batch where round = 1")
	require.NotEqual(t, "0", samples)
	tokens := sqlCSV(t, dir, managed, `select sum(len(m.completion_token_ids)) from (select unnest(messages) as m from train_batch where round = 1) where m.role = 'assistant'`)
	metric := func(cfg, run, round, step, name string) string {
		return sqlCSVRun(t, dir, cfg, run, fmt.Sprintf("select value from train_metrics where round = %s and step = %s and name = '%s'", round, step, name))
	}
	require.Equal(t, samples, metric(managed, "default", "1", "0", "token_id_samples"))
	require.Equal(t, "0", metric(managed, "default", "1", "0", "text_samples"))
	require.Equal(t, tokens, metric(managed, "default", "1", "1", "sampler_logprob_tokens"), "the trainer scored exactly the sampled tokens")
	same, err := strconv.ParseFloat(metric(managed, "default", "1", "1", "logprob_mismatch_mean"), 64)
	require.NoError(t, err)
	require.Less(t, same, 0.01, "server and trainer hold the same weights")
	require.NotContains(t, r.stderr, "differ from the trainer's")

	// The previous checkpoint served: a server over the base while round 2
	// trains checkpoint 1.
	port, err := serving.FreePort()
	require.NoError(t, err)
	prev := make([]string, len(argv))
	for i, a := range argv {
		prev[i] = strings.NewReplacer("{checkpoint}", ckpt, "{port}", strconv.Itoa(port), "{served_model}", "smol-base").Replace(a)
	}
	srv, err := serving.Start(prev, filepath.Join(t.TempDir(), "serve.log"), nil)
	require.NoError(t, err)
	defer srv.Stop(context.Background())
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	require.NoError(t, serving.WaitReady(context.Background(), nil, srv, base, "smol-base", 5*time.Minute))
	fixed := writeConfig(t, t.TempDir(), common+fmt.Sprintf(`model:
  backend: openai
  serving: fixed
  base_url: %s
  name: smol-base
  roles:
    designer: {backend: procedural}
    hint: {backend: procedural}
`, base))
	r = spade(t, dir, nil, "--config", fixed, "fork", "default", "--round", "1", "stale")
	require.Equal(t, 0, r.code, r.stderr)
	r = spade(t, dir, nil, "--config", fixed, "--run", "stale", "round", "2")
	require.Equal(t, 0, r.code, r.stderr)
	other, err := strconv.ParseFloat(metric(fixed, "stale", "2", "1", "logprob_mismatch_mean"), 64)
	require.NoError(t, err)
	t.Logf("mean |dlogp|: same weights %.2g, previous checkpoint served %.2g", same, other)
	require.Greater(t, other, 0.05)
	require.Greater(t, other, 10*same)
	require.Contains(t, r.stderr, "log-probs differ from the trainer's")
}
