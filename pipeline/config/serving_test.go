package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// TestServingConfig: model.serving and model.roles are checked with the
// rest of the config, before anything runs.
func TestServingConfig(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"trainer with an implicit fixed server", "model: {backend: openai, base_url: 'http://h/v1', name: m}\ngrpo: {trainer: torch}\n", "set model.serving to managed or reload"},
		{"trainer with fixed chosen", "model: {backend: openai, base_url: 'http://h/v1', name: m, serving: fixed}\ngrpo: {trainer: torch}\n", ""},
		{"managed without a command", "model: {backend: openai, serving: managed}\ngrpo: {base_checkpoint: /m}\n", "model.serve_command"},
		{"managed over the tiny model", "model: {backend: openai, serving: managed, serve_command: [vllm, serve, '{checkpoint}']}\n", "tiny"},
		{"managed", "model: {backend: openai, serving: managed, serve_command: [vllm, serve, '{checkpoint}']}\ngrpo: {base_checkpoint: /m}\n", ""},
		{"reload without a preset", "model: {backend: openai, base_url: 'http://h/v1', serving: reload}\ngrpo: {base_checkpoint: /m}\n", "model.reload.preset"},
		{"unknown serving", "model: {serving: always}\n", "model.serving must be fixed, managed or reload"},
		{"procedural designer with a real agent", "model: {backend: openai, base_url: 'http://h/v1', name: m, roles: {designer: {backend: procedural}, hint: {backend: procedural}}}\n", ""},
		{"bad role backend", "model: {roles: {agent: {backend: vllm}}}\n", "model.roles.agent.backend must be procedural or openai"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "spade.yaml")
			require.NoError(t, os.WriteFile(p, []byte(tc.yaml), 0o644))
			_, _, err := config.Load(p, nil)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, config.ErrInvalid)
			require.ErrorContains(t, err, tc.err)
		})
	}
	def := config.Default()
	require.Equal(t, def.Digest(), func() string { c := def; c.Model.CheckpointCache, c.Model.ServePort = "/x", 9; return c.Digest() }(), "cache and port are operational")
}
