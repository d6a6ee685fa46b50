package trainer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFilesAndWriteTo(t *testing.T) {
	files := Files()
	for _, want := range []string{"spade_trainer/__main__.py", "spade_trainer/cli.py", "spade_trainer/grpo.py", "spade_trainer/checkpoint.py", "spade_trainer/dist.py", "spade_trainer/tiny_tokenizer.json"} {
		if !slices.Contains(files, want) {
			t.Errorf("Files() lacks %s: %v", want, files)
		}
	}
	for _, f := range files {
		if filepath.Ext(f) != ".py" && f != "spade_trainer/tiny_tokenizer.json" {
			t.Errorf("unexpected embedded file %s", f)
		}
	}
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

func TestDigestStable(t *testing.T) {
	d := Digest()
	if len(d) != 64 || d != Digest() {
		t.Fatalf("digest %q not a stable sha256", d)
	}
}
