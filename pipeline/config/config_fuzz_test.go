package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// FuzzLoad: config.Load never panics on any file content; every error
// wraps ErrInvalid (the CLI's exit code 2); an accepted config validates
// and loads to the same digest twice (a run's pinned config must not
// depend on anything but the file).
func FuzzLoad(f *testing.F) {
	f.Add([]byte("seed: 7\nworkers: 2\nsample:\n  slots: 6\ndesign:\n  slots_per_part: 2\nrollout:\n  group_size: 4\n  envs_per_part: 2\n"))
	f.Add([]byte("model:\n  backend: openai\n  base_url: http://127.0.0.1:8000/v1\n  name: m\n  timeout_s: 2.5\n"))
	f.Add([]byte("sample:\n  slots: many\n"))
	f.Add([]byte("sample:\n\tslots: 3\n"))
	f.Add([]byte("sample: [1, 2]\n"))
	f.Add([]byte("rollout:\n  group_size: -3\n"))
	f.Add([]byte("label:\n  band_low: 0.9\n  band_high: 0.1\n"))
	f.Add([]byte("grpo:\n  trainer: command\n  command: []\n"))
	f.Add([]byte("sample:\n  skills: [a]\n  active_skills: 2\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("sample: &a\n  <<: *a\n"))
	f.Add([]byte("---\nseed: 1\n---\nseed: 2\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "spade.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := config.Load(path, nil)
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Load accepted a config that does not validate: %v", err)
		}
		again, _, err := config.Load(path, nil)
		if err != nil || again.Digest() != cfg.Digest() {
			t.Fatalf("second load differs: %v", err)
		}
	})
}
