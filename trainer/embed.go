// Package trainer ships the Python GRPO trainer (the spade_trainer package
// next to this file) inside the spade binary, so a run needs no checkout:
// the grpo stage extracts it with WriteTo and runs
// `/opt/spade/venv/bin/python -m spade_trainer` (grpo.python) with PYTHONPATH
// set to that directory.
// The Python protocol (argv, files, config keys, metrics) is documented in
// docs/training.md; the Go side of it is stages/grpo.RunTrainer.
package trainer

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// The package's modules and the tiny model's tokenizer (tiny_tokenizer.json,
// made by scripts/train_tiny_tokenizer.py).
//
//go:embed spade_trainer/*.py spade_trainer/tiny_tokenizer.json
var sources embed.FS

// Package is the Python package name, as passed to `python -m`.
const Package = "spade_trainer"

// Files returns the embedded source paths, slash-separated and relative to
// the PYTHONPATH root (e.g. "spade_trainer/cli.py"), sorted.
func Files() []string {
	var out []string
	// The embedded FS is static; WalkDir cannot fail on it.
	_ = fs.WalkDir(sources, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	sort.Strings(out)
	return out
}

// Digest is the hex sha256 over every embedded file's path and content (in
// Files order, each as path NUL length-prefixed content), so a stage
// fingerprint changes exactly when the trainer code does.
func Digest() string {
	h := sha256.New()
	for _, p := range Files() {
		b, _ := sources.ReadFile(p)
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		_, _ = h.Write(b) // hash writes never fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

// WriteTo writes the package to dir/spade_trainer (its *.py modules and
// tiny_tokenizer.json; dir is created if needed and becomes the
// PYTHONPATH entry). Each file is written to a
// temporary name and renamed, so a concurrent reader never imports a
// half-written module, and rewriting identical content is harmless.
// Errors name the file.
func WriteTo(dir string) error {
	for _, p := range Files() {
		b, err := sources.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read embedded %s: %w", p, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("extract trainer: %w", err)
		}
		if err := writeAtomic(dst, b); err != nil {
			return fmt.Errorf("extract trainer %s: %w", dst, err)
		}
	}
	return nil
}

func writeAtomic(dst string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // best effort; the write error is what matters
	}
	return err
}
