package trainer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// trainingFiles is the fingerprinted set, by name: the code that trains
// and the tiny model's tokenizer. A file added here changes every torch
// run's grpo fingerprint; a test server or helper does not belong here.
var trainingFiles = []string{
	"spade_trainer/__init__.py",
	"spade_trainer/__main__.py",
	"spade_trainer/attention.py",
	"spade_trainer/checkpoint.py",
	"spade_trainer/cli.py",
	"spade_trainer/config.py",
	"spade_trainer/dist.py",
	"spade_trainer/grpo.py",
	"spade_trainer/tiny_tokenizer.json",
	"spade_trainer/tokenizer.py",
}

func TestFilesAndWriteTo(t *testing.T) {
	files := Files()
	dir := t.TempDir()
	if err := WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	if err := WriteTo(dir); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(f) // the checkout's copy, next to this test
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from the source", f)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, Package, ".tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestEmbeddedSets: the digest set is exactly trainingFiles, the
// evaluator is embedded but not fingerprinted, and every file of the
// package directory is one or the other (a new file must be classified;
// the loopback test server lives in trainer/tests).
func TestEmbeddedSets(t *testing.T) {
	if got := TrainingFiles(); !slices.Equal(got, trainingFiles) {
		t.Errorf("TrainingFiles() = %v\nwant %v", got, trainingFiles)
	}
	if got := EvaluatorFiles(); !slices.Equal(got, []string{"spade_trainer/evaluate.py"}) {
		t.Errorf("EvaluatorFiles() = %v", got)
	}
	files := Files()
	entries, err := os.ReadDir(Package)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := Package + "/" + e.Name()
		if e.IsDir() || e.Name()[0] == '.' {
			continue // __pycache__, editor files
		}
		if !slices.Contains(files, p) {
			t.Errorf("%s is in the package directory but not embedded: add it to training (it trains) or move it out (a test server or helper)", p)
		}
	}
	if slices.Contains(files, Package+"/wire_server.py") {
		t.Error("the loopback test server is embedded")
	}
}

// TestDigestCoversExactlyTheTrainingFiles recomputes Digest from the
// checkout's copies of trainingFiles: nothing else feeds it.
func TestDigestCoversExactlyTheTrainingFiles(t *testing.T) {
	h := sha256.New()
	for _, p := range trainingFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
	if d := Digest(); d != hex.EncodeToString(h.Sum(nil)) || d != Digest() {
		t.Fatalf("Digest() = %s is not the digest of the training files", d)
	}
}
