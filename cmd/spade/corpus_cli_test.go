package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/datasets"
)

// TestCorpusImportSkipReasons runs `spade corpus import` on inputs whose
// rows are skipped and checks what the user is told: a line over the line
// cap is reported as such (with both sizes and the flag that raises the
// cap) also when it is the file's only line, a failed import lists the
// skipped rows, and a problem of the whole row is printed without a field.
func TestCorpusImportSkipReasons(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
		return p
	}
	// 17 MiB of text: over the default line cap of 4 x 4 MiB.
	huge := `{"text":"` + strings.Repeat("x", 17<<20) + `"}` + "\n"
	good := `{"text":"a good document about tides"}` + "\n"

	t.Run("only line over the line cap", func(t *testing.T) {
		p := write("huge.jsonl", huge)
		r := spade(t, dir, nil, "--run", "cap1", "corpus", "import", p)
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stderr, p+": no parsable rows: none of 1 lines could be decoded as a JSON object; the first: line 1: line is 17825804 bytes, over the line cap of 16777216 bytes (4 x MaxDocBytes, set with --max-doc-bytes; raise that to read longer lines)")
	})

	t.Run("line over the line cap among good ones", func(t *testing.T) {
		p := write("huge-and-good.jsonl", huge+good)
		r := spade(t, dir, nil, "--run", "cap2", "corpus", "import", p)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "imported 1 documents")
		require.Contains(t, r.stdout, "  skipped "+p+":1: line is 17825804 bytes, over the line cap of 16777216 bytes (4 x MaxDocBytes, set with --max-doc-bytes")
		require.NotContains(t, r.stdout, "field :")
	})

	t.Run("every row skipped", func(t *testing.T) {
		p := write("blank.jsonl", `{"text":""}`+"\n"+`{"text":"  "}`+"\n")
		r := spade(t, dir, nil, "--run", "blank", "corpus", "import", p)
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stderr, "import produced no documents (2 rows read, 2 skipped):\n"+
			"  skipped "+p+":1 field text: text is empty\n"+
			"  skipped "+p+":2 field text: text is empty\n")
		// --json prints the report and the error on stdout too.
		j := spade(t, dir, nil, "--run", "blank2", "corpus", "import", "--json", p)
		require.Equal(t, 1, j.code, j.stderr)
		var got struct {
			Error   string `json:"error"`
			Read    int    `json:"read"`
			Skipped int    `json:"skipped"`
			Issues  []struct {
				Line  int    `json:"line"`
				Field string `json:"field"`
			} `json:"issues"`
		}
		require.NoError(t, json.Unmarshal([]byte(j.stdout), &got), j.stdout)
		require.Contains(t, got.Error, "import produced no documents")
		require.Equal(t, 2, got.Read)
		require.Equal(t, 2, got.Skipped)
		require.Len(t, got.Issues, 2)
		require.Equal(t, "text", got.Issues[1].Field)
	})

	t.Run("missing path with --json", func(t *testing.T) {
		// A path that does not exist is a usage error (exit 2); --json
		// still prints the object with the error, as for other failures.
		missing := filepath.Join(dir, "absent.jsonl")
		j := spade(t, dir, nil, "--run", "absent", "corpus", "import", "--json", missing)
		require.Equal(t, 2, j.code, j.stderr)
		var got struct {
			Error     string `json:"error"`
			Documents int    `json:"documents"`
		}
		require.NoError(t, json.Unmarshal([]byte(j.stdout), &got), j.stdout)
		require.Contains(t, got.Error, missing)
		require.Zero(t, got.Documents)
	})

	t.Run("whole-row and field issues", func(t *testing.T) {
		p := write("mixed.jsonl", "[1,2]\n"+`{"id":"b","text":""}`+"\n"+`{"id":"c","text":"fine"}`+"\n")
		r := spade(t, dir, nil, "--run", "mixed", "corpus", "import", p, "--id", "id")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "  skipped "+p+":1: not a JSON object: line holds a JSON array, not an object\n")
		require.Contains(t, r.stdout, "  skipped "+p+":2 field text: text is empty\n")
		require.NotContains(t, r.stdout, "field :")
	})

	t.Run("lone surrogates and numeric ids", func(t *testing.T) {
		p := write("values.jsonl", `{"id":1e20,"text":"one"}`+"\n"+`{"id":2,"text":"t4\ud800x"}`+"\n"+`{"id":3.50,"text":"three"}`+"\n")
		r := spade(t, dir, nil, "--run", "values", "corpus", "import", p, "--id", "id")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "  skipped "+p+`:2 field text: text field holds a \u escape of a lone UTF-16 surrogate`)
		q := spade(t, dir, nil, "--run", "values", "sql", "--format", "csv", "select doc_id, text from corpus order by text")
		require.Equal(t, 0, q.code, q.stderr)
		require.Equal(t, "doc_id,text\n100000000000000000000,one\n3.5,three\n", q.stdout)
	})
}

// TestCorpusImportDirLinkInFingerprint: the importer reads a symbolic link
// to a .txt or .md file of an imported directory like the file, so the
// file it names is part of the corpus stage's fingerprint. The digest
// once hashed regular files only: importing the directory again after the
// linked file changed said "already imported" (exit 0) of a run whose
// corpus no longer matches it, instead of a conflict (exit 3).
func TestCorpusImportDirLinkInFingerprint(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	docs := filepath.Join(dir, "docs")
	require.NoError(t, os.MkdirAll(docs, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(docs, "a.txt"), []byte("Plain text a.\n"), 0o644))
	target := filepath.Join(outside, "real.md")
	require.NoError(t, os.WriteFile(target, []byte("# Linked\n\nFirst version.\n"), 0o644))
	require.NoError(t, os.Symlink(target, filepath.Join(docs, "b.md")))

	d1, err := datasets.InputDigest(datasets.ImportOptions{}, docs)
	require.NoError(t, err)
	r := spade(t, dir, nil, "--run", "linked", "corpus", "import", docs)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "imported 2 documents")

	require.NoError(t, os.WriteFile(target, []byte("# Linked\n\nSecond version.\n"), 0o644))
	d2, err := datasets.InputDigest(datasets.ImportOptions{}, docs)
	require.NoError(t, err)
	require.NotEqual(t, d1, d2, "the linked file's content is part of the digest")
	r = spade(t, dir, nil, "--run", "linked", "corpus", "import", docs)
	require.Equal(t, 3, r.code, "the run's corpus holds the first version: %s%s", r.stdout, r.stderr)
}

// TestCorpusImportSpellingOfPath: the corpus committed by an import
// depends on the input's name and content, not on the working directory
// or on how the path was typed. Importing the same file or directory into
// a run again from another directory, or by an absolute instead of a
// relative path, is a no-op ("already imported", exit 0); the stage
// fingerprint once held the paths as typed, so these were refused (exit
// 3). An input whose documents would differ (other content, another
// file name that the source label is taken from, a file added to a
// directory) is still refused.
func TestCorpusImportSpellingOfPath(t *testing.T) {
	base := t.TempDir()
	store := "file://" + filepath.Join(base, "store")
	proj := filepath.Join(base, "proj")
	data := filepath.Join(proj, "data")
	docs := filepath.Join(proj, "docs")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(docs, "sub"), 0o755))
	x := filepath.Join(data, "x.jsonl")
	require.NoError(t, os.WriteFile(x, []byte(`{"text":"the tides of the North Sea"}`+"\n"+`{"text":"a second document"}`+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(docs, "a.txt"), []byte("Plain text a.\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(docs, "sub", "b.md"), []byte("# Bee\n\nAbout bees.\n"), 0o644))

	imp := func(dir, run string, paths ...string) result {
		t.Helper()
		return spade(t, dir, nil, append([]string{"--store", store, "--run", run, "corpus", "import"}, paths...)...)
	}
	sources := func(run string) string {
		t.Helper()
		q := spade(t, base, nil, "--store", store, "--run", run, "sql", "--format", "csv", "select distinct source from corpus order by source")
		require.Equal(t, 0, q.code, q.stderr)
		return q.stdout
	}

	t.Run("file", func(t *testing.T) {
		r := imp(proj, "file", "data/x.jsonl")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "imported 2 documents")
		for _, again := range []struct{ dir, path string }{
			{"/", x},
			{proj, "./data/x.jsonl"},
			{data, "x.jsonl"},
			{filepath.Join(proj, "docs"), "../data/x.jsonl"},
			{base, "proj/data//x.jsonl"},
		} {
			r := imp(again.dir, "file", again.path)
			require.Equal(t, 0, r.code, "%s in %s: %s%s", again.path, again.dir, r.stdout, r.stderr)
			require.Contains(t, r.stdout, "already imported (2 documents)", again)
		}
		require.Equal(t, "source\nx.jsonl\n", sources("file"))
	})

	t.Run("file with other content or name", func(t *testing.T) {
		other := filepath.Join(base, "other")
		require.NoError(t, os.MkdirAll(other, 0o755))
		orig, err := os.ReadFile(x)
		require.NoError(t, err)
		// The same name, other content.
		require.NoError(t, os.WriteFile(filepath.Join(other, "x.jsonl"), append(orig, `{"text":"a third"}`+"\n"...), 0o644))
		r := imp(other, "file", "x.jsonl")
		require.Equal(t, 3, r.code, r.stdout+r.stderr)
		// The same content, another name: the source label differs.
		require.NoError(t, os.WriteFile(filepath.Join(other, "y.jsonl"), orig, 0o644))
		r = imp(other, "file", "y.jsonl")
		require.Equal(t, 3, r.code, r.stdout+r.stderr)
	})

	t.Run("directory", func(t *testing.T) {
		r := imp(proj, "dir", "docs")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "imported 2 documents")
		require.Equal(t, "source\ndocs\n", sources("dir"))
		for _, again := range []struct{ dir, path string }{
			{"/", docs},
			{"/", docs + "/."},
			{proj, "docs/"},
			{proj, "./docs/."},
			{docs, "."},
			{filepath.Join(docs, "sub"), ".."},
		} {
			r := imp(again.dir, "dir", again.path)
			require.Equal(t, 0, r.code, "%s in %s: %s%s", again.path, again.dir, r.stdout, r.stderr)
			require.Contains(t, r.stdout, "already imported (2 documents)", again)
		}
		// A file added to the directory changes the corpus.
		require.NoError(t, os.WriteFile(filepath.Join(docs, "c.txt"), []byte("Plain text c.\n"), 0o644))
		r = imp(docs, "dir", ".")
		require.Equal(t, 3, r.code, r.stdout+r.stderr)
	})

	t.Run("directory spelt with a trailing dot", func(t *testing.T) {
		// The source label is the directory's name however it is spelt.
		for i, p := range []string{"docs/.", "docs/", "."} {
			dir := proj
			if p == "." {
				dir = docs
			}
			run := fmt.Sprintf("dot%d", i)
			r := imp(dir, run, p)
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "source\ndocs\n", sources(run), p)
		}
	})
}

// TestCorpusImportChecksOptionsFirst: an unusable option (a format that
// does not exist or does not fit the input, a malformed field path) is a
// usage error naming the flag, exit 2, whether or not the run has a
// corpus. On a run with a corpus it used to be a conflict (exit 3, the
// fingerprint of the options differed), and on a new run an error of the
// corpus stage printed after its "stage start" line.
func TestCorpusImportChecksOptionsFirst(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "docs.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(`{"text":"a document about tides"}`+"\n"), 0o644))
	r := spade(t, dir, nil, "--run", "has", "corpus", "import", p)
	require.Equal(t, 0, r.code, r.stderr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "csv"}, `spade: corpus import: --format: unknown format "csv" (want auto, jsonl, parquet or dir)` + "\n"},
		{[]string{"--text", "body[[].text"}, `spade: corpus import: --text: bad field path: "body[[].text": selector [[] at offset 4 is neither [] nor [N]` + "\n"},
		{[]string{"--id", "a..b"}, `spade: corpus import: --id: bad field path: "a..b": empty key at offset 2` + "\n"},
		{[]string{"--format", "dir"}, "spade: corpus import: bad import options: " + p + " is a file, but format is dir\n"},
	} {
		for _, run := range []string{"has", "new"} {
			r := spade(t, dir, nil, append([]string{"--run", run, "corpus", "import", p}, c.args...)...)
			require.Equal(t, 2, r.code, "%s %v: %s", run, c.args, r.stderr)
			require.Equal(t, c.want, r.stderr, "%s %v", run, c.args)
		}
	}
	_, err := os.Stat(filepath.Join(dir, "runs", "new"))
	require.True(t, os.IsNotExist(err), "no run created: %v", err)
}
