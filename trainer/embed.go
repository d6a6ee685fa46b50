// Package trainer ships the Python GRPO trainer (the spade_trainer package
// next to this file) inside the spade binary, so a run needs no checkout:
// the grpo stage extracts it with WriteTo and runs
// `/opt/spade/venv/bin/python -m spade_trainer` (grpo.python) with PYTHONPATH
// set to that directory.
// The Python protocol (argv, files, config keys, metrics) is documented in
// docs/training.md; the Go side of it is stages/grpo.RunTrainer.
//
// The embedded files are the trainer: Digest, which feeds the grpo stage's
// fingerprint, covers exactly TrainingFiles. The eval stage's helper
// (spade_trainer/evaluate.py) is embedded beside it but outside the
// digest; test servers (trainer/tests/wire_server.py) and benchmark
// helpers (scripts/) are not embedded at all.
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

// training is what trains: the modules `python -m spade_trainer` runs and
// the tiny model's tokenizer (tiny_tokenizer.json, made by
// scripts/train_tiny_tokenizer.py). Listed by name, not by glob, so that
// a module added to the directory is classified (TestEmbeddedSets fails
// until it is listed here or in evaluator).
//
//go:embed spade_trainer/__init__.py spade_trainer/__main__.py spade_trainer/attention.py spade_trainer/checkpoint.py
//go:embed spade_trainer/cli.py spade_trainer/config.py spade_trainer/dist.py spade_trainer/grpo.py spade_trainer/tokenizer.py
//go:embed spade_trainer/tiny_tokenizer.json
var training embed.FS

// evaluator is the evaluation helper the eval stage runs (`python -m
// spade_trainer.evaluate`, engines/evaluate): shipped in the same package
// directory, but it trains nothing, so it is outside Digest.
//
//go:embed spade_trainer/evaluate.py
var evaluator embed.FS

// Package is the Python package name, as passed to `python -m`.
const Package = "spade_trainer"

// walk returns the regular files of fsys, slash-separated and relative to
// the PYTHONPATH root, sorted.
func walk(fsys embed.FS) []string {
	var out []string
	// The embedded FS is static; WalkDir cannot fail on it.
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	sort.Strings(out)
	return out
}

// TrainingFiles returns the paths of the files that train (the grpo
// stage's trainer; what Digest covers), slash-separated and relative to
// the PYTHONPATH root (e.g. "spade_trainer/cli.py"), sorted.
func TrainingFiles() []string { return walk(training) }

// EvaluatorFiles returns the paths of the eval stage's helper
// ("spade_trainer/evaluate.py"), in TrainingFiles' form. Digest does not
// cover them.
func EvaluatorFiles() []string { return walk(evaluator) }

// Files returns every embedded path WriteTo writes: TrainingFiles and
// EvaluatorFiles, sorted. Test servers and benchmark helpers are not
// embedded (trainer/tests/wire_server.py, scripts/gpu_grpo_bench.py).
func Files() []string {
	out := append(TrainingFiles(), EvaluatorFiles()...)
	sort.Strings(out)
	return out
}

// readFile returns an embedded file's bytes, from whichever set holds it.
func readFile(p string) ([]byte, error) {
	if b, err := training.ReadFile(p); err == nil {
		return b, nil
	}
	return evaluator.ReadFile(p)
}

// Digest is the hex sha256 over the path and content of every file of
// TrainingFiles (in that order, each as path NUL length NUL content), so
// the grpo stage's fingerprint changes exactly when the code that trains
// does, and not when the evaluator, a test server or a test changes.
func Digest() string { return digestOf(training, TrainingFiles()) }

// EvaluatorDigest is Digest's hash over EvaluatorFiles: part of what an
// evaluation's scores depend on (engines/evaluate.Settings), so an edited
// evaluator is another evaluation, and never part of the grpo stage's
// fingerprint.
func EvaluatorDigest() string { return digestOf(evaluator, EvaluatorFiles()) }

// digestOf hashes files of fsys as Digest describes.
func digestOf(fsys embed.FS, files []string) string {
	h := sha256.New()
	for _, p := range files {
		b, _ := fsys.ReadFile(p)
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		_, _ = h.Write(b) // hash writes never fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

// WriteTo writes the package to dir/spade_trainer (Files: the training
// modules, tiny_tokenizer.json and the evaluator; dir is created if needed
// and becomes the PYTHONPATH entry). Each file is written to a
// temporary name and renamed, so a concurrent reader never imports a
// half-written module, and rewriting identical content is harmless.
// Errors name the file.
func WriteTo(dir string) error {
	for _, p := range Files() {
		b, err := readFile(p)
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
