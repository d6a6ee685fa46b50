package datasets

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSourceLabel: the default label is the input's name however its path
// is spelt; an explicit source wins.
func TestSourceLabel(t *testing.T) {
	base := t.TempDir()
	docs := filepath.Join(base, "docs")
	if err := os.MkdirAll(filepath.Join(docs, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(docs)
	for p, want := range map[string]string{
		"docs":            "docs",
		"docs/":           "docs",
		"docs/.":          "docs",
		"./docs/./":       "docs",
		docs:              "docs",
		docs + "/.":       "docs",
		".":               "docs",
		"sub/..":          "docs",
		"..":              filepath.Base(base),
		"data/x.jsonl":    "x.jsonl",
		"./x.jsonl":       "x.jsonl",
		"/abs/d//x.jsonl": "x.jsonl",
		"/":               "/",
	} {
		if got := SourceLabel("", p); got != want {
			t.Errorf("SourceLabel(%q) = %q, want %q", p, got, want)
		}
	}
	if got := SourceLabel("mine", "docs/."); got != "mine" {
		t.Errorf("explicit source: got %q", got)
	}
}

// TestInputDigest: the digest of an input does not depend on the working
// directory or the spelling of its path, and changes with everything the
// imported documents take from it.
func TestInputDigest(t *testing.T) {
	base := t.TempDir()
	proj := filepath.Join(base, "proj")
	x := writeFile(t, proj, "data/x.jsonl", []byte(`{"text":"one"}`+"\n"))
	docs := filepath.Join(proj, "docs")
	writeFile(t, docs, "a.txt", []byte("Plain text a.\n"))
	writeFile(t, docs, "sub/b.md", []byte("# Bee\n\nAbout bees.\n"))
	writeFile(t, docs, "notes.rst", []byte("not read by the importer\n"))
	digest := func(opts ImportOptions, p string) string {
		t.Helper()
		d, err := InputDigest(opts, p)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var none ImportOptions

	fileD, dirD := digest(none, x), digest(none, docs)
	for _, c := range []struct{ wd, file, dir string }{
		{proj, "data/x.jsonl", "docs"},
		{proj, "./data/x.jsonl", "docs/"},
		{docs, "../data/x.jsonl", "."},
		{filepath.Join(docs, "sub"), "../../data/x.jsonl", ".."},
		{"/", x, docs + "/."},
	} {
		t.Chdir(c.wd)
		if got := digest(none, c.file); got != fileD {
			t.Errorf("%s in %s: digest differs", c.file, c.wd)
		}
		if got := digest(none, c.dir); got != dirD {
			t.Errorf("%s in %s: digest differs", c.dir, c.wd)
		}
	}
	t.Chdir(base)

	// A file of the same content under another name: the label differs.
	y := writeFile(t, base, "y.jsonl", []byte(`{"text":"one"}`+"\n"))
	if digest(none, y) == fileD {
		t.Error("a renamed file has the same digest")
	}
	// The same name, other content.
	if digest(none, writeFile(t, base, "other/x.jsonl", []byte(`{"text":"two"}`+"\n"))) == fileD {
		t.Error("other content has the same digest")
	}
	// A copy of the directory under another name has another label,
	// unless the label is given.
	cp := filepath.Join(base, "copy")
	writeFile(t, cp, "a.txt", []byte("Plain text a.\n"))
	writeFile(t, cp, "sub/b.md", []byte("# Bee\n\nAbout bees.\n"))
	if digest(none, cp) == dirD {
		t.Error("a directory of another name has the same digest")
	}
	labelled := ImportOptions{Source: "L"}
	if digest(labelled, cp) != digest(labelled, docs) {
		t.Error("with --source, the directory's own name should not matter")
	}
	// Files the importer does not read, and entries it skips unread, add
	// nothing; a new document, a renamed or moved one, and changed content do.
	writeFile(t, docs, "more-notes.rst", []byte("still not read\n"))
	if err := syscall.Mkfifo(filepath.Join(docs, "fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "missing.md"), filepath.Join(docs, "dangling.md")); err != nil {
		t.Fatal(err)
	}
	if digest(none, docs) != dirD {
		t.Error("files the importer does not read changed the digest")
	}
	writeFile(t, base, "missing.md", []byte("# Now here\n\nText.\n"))
	if digest(none, docs) == dirD {
		t.Error("a link that now names a file did not change the digest")
	}
	if err := os.Remove(filepath.Join(docs, "dangling.md")); err != nil {
		t.Fatal(err)
	}
	if digest(none, docs) != dirD {
		t.Fatal("digest not back after removing the link")
	}
	if err := os.Rename(filepath.Join(docs, "sub", "b.md"), filepath.Join(docs, "b.md")); err != nil {
		t.Fatal(err)
	}
	if digest(none, docs) == dirD {
		t.Error("a moved document did not change the digest")
	}
	if err := os.Rename(filepath.Join(docs, "b.md"), filepath.Join(docs, "sub", "b.md")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, docs, "a.txt", []byte("Plain text A.\n"))
	if digest(none, docs) == dirD {
		t.Error("changed content did not change the digest")
	}
	// A document over MaxDocBytes is skipped unread.
	writeFile(t, docs, "a.txt", []byte("Plain text a.\n"))
	small := ImportOptions{MaxDocBytes: 16}
	before := digest(small, docs)
	writeFile(t, docs, "big.txt", []byte("a document longer than sixteen bytes\n"))
	if digest(small, docs) != before {
		t.Error("a document over the cap changed the digest")
	}
	if digest(none, docs) == dirD {
		t.Error("a new document did not change the digest")
	}

	if _, err := InputDigest(none, filepath.Join(base, "absent")); !os.IsNotExist(err) {
		t.Errorf("missing path: err %v", err)
	}
}
