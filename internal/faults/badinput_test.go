package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
)

// badInputFiles writes the corpus inputs of TestBadInput into dir: a
// corrupt and a truncated Parquet file (made from a real corpus part
// file), an empty file, a 50 MB document, a 5 MB one, invalid UTF-8 and a
// broken JSON line.
func badInputFiles(t *testing.T, dir, goodParquet string) {
	t.Helper()
	pq, err := os.ReadFile(goodParquet)
	require.NoError(t, err)
	writeFile(t, dir, "trunc.parquet", string(pq[:len(pq)/3]))
	corrupt := append([]byte(nil), pq...)
	for i := 64; i < len(corrupt)-64; i += 5 {
		corrupt[i] ^= 0x5a
	}
	writeFile(t, dir, "corrupt.parquet", string(corrupt))
	writeFile(t, dir, "empty.jsonl", "")
	line := func(text string) string {
		b, _ := json.Marshal(map[string]string{"text": text})
		return string(b) + "\n"
	}
	ok := line(strings.Repeat("a good document about tides and moons ", 20))
	writeFile(t, dir, "huge.jsonl", line(strings.Repeat("x", 50<<20))+ok)
	writeFile(t, dir, "big.jsonl", line(strings.Repeat("y", 5<<20))+ok)
	writeFile(t, dir, "badutf8.jsonl", ok+"{\"text\": \"bad \xff\xfe bytes in an otherwise fine document\"}\n")
	writeFile(t, dir, "broken.jsonl", ok+"{\"text\": \"this line never ends\n"+line(strings.Repeat("third document text ", 20)))
	writeFile(t, dir, "badtype.yaml", crashConfig+"model:\n  timeout_s: fast\n")
	writeFile(t, dir, "seq.yaml", "sample: [1, 2]\n")
	writeFile(t, dir, "tab.yaml", "sample:\n\tslots: 3\n")
	writeFile(t, dir, "unknown.yaml", crashConfig+"workerz: 2\n")
	writeFile(t, dir, "negative.yaml", strings.Replace(crashConfig, "group_size: 2", "group_size: -3", 1))
	writeFile(t, dir, "band.yaml", crashConfig+"label:\n  band_low: 0.9\n  band_high: 0.1\n")
}

// editManifestVersion rewrites format_version in one committed manifest.
func editManifestVersion(t *testing.T, path string, v int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := strings.Replace(string(b), `"format_version": 1,`, fmt.Sprintf(`"format_version": %d,`, v), 1)
	require.NotEqual(t, string(b), out)
	require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
}

// flipByte flips one bit in the middle of the only part file in dir.
func flipByte(t *testing.T, dir string) string {
	t.Helper()
	parts, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	require.NoError(t, err)
	require.Len(t, parts, 1)
	b, err := os.ReadFile(parts[0])
	require.NoError(t, err)
	b[len(b)/2] ^= 1
	require.NoError(t, os.WriteFile(parts[0], b, 0o644))
	return filepath.Base(parts[0])
}

// TestBadInput feeds spade bad input of 20+ kinds not covered by
// cmd/spade's TestBadInput, each against a copy of a committed two-round
// run: the error names the file, line or row and field (or the manifest
// or part file), usage errors exit 2, and no file that was there before
// changes or vanishes. A failed corpus import into a new run adds nothing,
// not even the run's _RUN.json (written right before the first commit);
// a round that fails on a damaged input may have committed earlier stages
// of its own new round.
func TestBadInput(t *testing.T) {
	refRun := referenceRun(t)
	g := s3server.Start(t)
	in := t.TempDir()
	goodPq, err := filepath.Glob(filepath.Join(refRun.dir, "runs/default/round=000000/corpus/part-*.parquet"))
	require.NoError(t, err)
	require.Len(t, goodPq, 1)
	badInputFiles(t, in, goodPq[0])
	p := func(name string) string { return filepath.Join(in, name) }
	s3url := storeURLFor(g.Endpoint, "bad", nil)
	r2 := "runs/default/round=000002/"

	type tc struct {
		name  string
		setup func(t *testing.T, dir string) // damages the copied run
		env   []string
		args  []string
		code  int
		want  []string // in stderr, or stdout when code is 0
		// newFiles says which new store paths the invocation may add.
		newFiles func(path string) bool
	}
	newRun := func(run string) func(string) bool {
		return func(path string) bool { return strings.HasPrefix(path, "runs/"+run+"/") }
	}
	// nothingOf allows no new file at all under the run.
	nothingOf := func(string) func(string) bool {
		return func(string) bool { return false }
	}
	round3 := func(path string) bool { return strings.HasPrefix(path, "runs/default/round=000003/") }
	cases := []tc{
		{name: "corrupt parquet", args: []string{"--run", "c1", "corpus", "import", p("corrupt.parquet")}, code: 1,
			want: []string{"corrupt.parquet", "corrupt input"}, newFiles: nothingOf("c1")},
		{name: "truncated parquet", args: []string{"--run", "c2", "corpus", "import", p("trunc.parquet")}, code: 1,
			want: []string{"trunc.parquet", "corrupt input"}, newFiles: nothingOf("c2")},
		{name: "empty corpus file", args: []string{"--run", "c3", "corpus", "import", p("empty.jsonl")}, code: 1,
			want: []string{"empty.jsonl", "empty input"}, newFiles: nothingOf("c3")},
		{name: "50 MB document skipped", args: []string{"--run", "c4", "corpus", "import", p("huge.jsonl")}, code: 0,
			want: []string{"imported 1 documents", "skipped " + p("huge.jsonl") + ":1", "over the line cap"}, newFiles: newRun("c4")},
		{name: "5 MB document over the doc cap", args: []string{"--run", "c5", "corpus", "import", p("big.jsonl")}, code: 0,
			want: []string{"imported 1 documents", "skipped " + p("big.jsonl") + ":1 field text"}, newFiles: newRun("c5")},
		{name: "invalid UTF-8", args: []string{"--run", "c6", "corpus", "import", p("badutf8.jsonl")}, code: 0,
			want: []string{"imported 1 documents", p("badutf8.jsonl") + ":2 field text", "not valid UTF-8"}, newFiles: newRun("c6")},
		{name: "broken JSONL line", args: []string{"--run", "c7", "corpus", "import", p("broken.jsonl")}, code: 0,
			want: []string{"imported 2 documents", p("broken.jsonl") + ":2", "not a JSON object"}, newFiles: newRun("c7")},
		{name: "wrong id field path", args: []string{"--run", "c8", "corpus", "import", p("broken.jsonl"), "--id", "meta.id"}, code: 1,
			want: []string{"broken.jsonl", `id path "meta.id" matched none`}, newFiles: nothingOf("c8")},
		{name: "malformed field path", args: []string{"--run", "c9", "corpus", "import", p("broken.jsonl"), "--text", "body[[].text"}, code: 2,
			want: []string{"body[[].text"}, newFiles: nothingOf("c9")},
		{name: "unknown import format", args: []string{"--run", "c10", "corpus", "import", "--format", "xml", p("broken.jsonl")}, code: 2,
			want: []string{`unknown format "xml"`}, newFiles: nothingOf("c10")},
		{name: "missing corpus file", args: []string{"--run", "c11", "corpus", "import", p("absent.jsonl")}, code: 2,
			want: []string{"absent.jsonl", "no such file"}},
		{name: "yaml float field given a word", args: []string{"--config", p("badtype.yaml"), "round", "3"}, code: 2,
			want: []string{"badtype.yaml", "line 12", "fast"}},
		{name: "yaml list where a mapping belongs", args: []string{"--config", p("seq.yaml"), "round", "3"}, code: 2,
			want: []string{"seq.yaml", "line 1", "sample is a section: write its settings under it"}},
		{name: "yaml syntax (tab)", args: []string{"--config", p("tab.yaml"), "round", "3"}, code: 2,
			want: []string{"tab.yaml", "line 2"}},
		{name: "unknown top-level key", args: []string{"--config", p("unknown.yaml"), "round", "3"}, code: 2,
			want: []string{"unknown.yaml", "line 11", "workerz"}},
		{name: "negative count", args: []string{"--config", p("negative.yaml"), "round", "3"}, code: 2,
			want: []string{"rollout.group_size must be > 0 and <= 1048576 (got -3)"}},
		{name: "reversed learnable band", args: []string{"--config", p("band.yaml"), "round", "3"}, code: 2,
			want: []string{"band_low <= band_high", "0.9, 0.1"}},
		{name: "missing config file", args: []string{"--config", p("absent.yaml"), "round", "3"}, code: 2,
			want: []string{"absent.yaml"}},
		{name: "round from the future", args: []string{"round", "5"}, code: 1,
			want: []string{"round 5 needs round 4"}},
		{name: "stage at a future round", args: []string{"stage", "validate", "--round", "7"}, code: 1,
			want: []string{"round 7 needs round 6 of run default sealed, and it is not sealed", "round 2 is the run's last sealed round", "starting with `spade round 3`"}},
		{name: "s3 bucket does not exist", args: []string{"--store", strings.Replace(s3url, "spade-test", "no-such-bucket", 1), "status"}, code: 1,
			want: []string{`bucket "no-such-bucket"`, "does not exist"}},
		{name: "wrong s3 credentials", env: []string{"AWS_SECRET_ACCESS_KEY=not-the-secret"}, args: []string{"--store", s3url, "status"}, code: 1,
			want: []string{"access denied", "wrong credentials"}},
		{name: "s3 url parameter typo", args: []string{"--store", strings.Replace(s3url, "endpoint=", "endpiont=", 1), "status"}, code: 2,
			want: []string{`unknown parameter "endpiont"`}},
		{name: "s3 part size below the minimum", args: []string{"--store", s3url + "&part_size=1024", "status"}, code: 2,
			want: []string{`part_size "1024"`, "5242880"}},
		{name: "file url with a remote host", args: []string{"--store", "file://fileserver/runs", "status"}, code: 2,
			want: []string{`host "fileserver" is not local`}},
		{name: "manifest of unknown version: status", setup: func(t *testing.T, dir string) {
			editManifestVersion(t, filepath.Join(dir, r2, "memory/_manifest.json"), 9)
		}, args: []string{"status"}, code: 1, want: []string{"round=000002/memory/_manifest.json", "unknown storage format version 9"}},
		{name: "manifest of unknown version: sql", setup: func(t *testing.T, dir string) {
			editManifestVersion(t, filepath.Join(dir, r2, "memory/_manifest.json"), 9)
		}, args: []string{"sql", "select count(*) from labels"}, code: 1, want: []string{"round=000002/memory/_manifest.json", "unknown storage format version 9"}},
		{name: "manifest of unknown version: round", setup: func(t *testing.T, dir string) {
			editManifestVersion(t, filepath.Join(dir, r2, "memory/_manifest.json"), 9)
		}, args: []string{"round", "3"}, code: 1, want: []string{"round=000002/memory/_manifest.json", "unknown storage format version 9"}, newFiles: round3},
		{name: "truncated manifest JSON", setup: func(t *testing.T, dir string) {
			m := filepath.Join(dir, r2, "labels/_manifest.json")
			b, err := os.ReadFile(m)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(m, b[:len(b)/2], 0o644))
		}, args: []string{"status"}, code: 1, want: []string{"round=000002/labels/_manifest.json", "malformed JSON"}},
		{name: "part file hash mismatch: round", setup: func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, r2, "memory"))
		}, args: []string{"round", "3"}, code: 1, want: []string{"round=000002/memory/part-00000-of-00001-", "integrity check failed"}, newFiles: round3},
		{name: "part file hash mismatch: sql", setup: func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, r2, "memory"))
		}, args: []string{"sql", "select count(*) from memory"}, code: 1, want: []string{"round=000002/memory/part-00000-of-00001-", "integrity check failed"}},
	}
	require.GreaterOrEqual(t, len(cases), 15)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, filepath.Join(refRun.dir, "runs"), filepath.Join(dir, "runs"))
			cfg := writeFile(t, dir, "cfg.yaml", crashConfig)
			if c.setup != nil {
				c.setup(t, dir)
			}
			before := treeDigest(t, filepath.Join(dir, "runs"))
			args := c.args
			if !strings.Contains(strings.Join(args, " "), "--config") {
				args = append([]string{"--config", cfg}, args...)
			}
			r := spade(t, dir, c.env, args...)
			require.Equal(t, c.code, r.code, "stdout: %s\nstderr: %s", r.stdout, tail(r.stderr, 3000))
			out := r.stderr
			if c.code == 0 {
				out = r.stdout
			}
			for _, w := range c.want {
				require.Contains(t, out, w)
			}
			after := treeDigest(t, filepath.Join(dir, "runs"))
			for path, sum := range before {
				require.Equal(t, sum, after[path], "%s was changed or removed", path)
			}
			for path := range after {
				if _, had := before[path]; !had {
					require.True(t, c.newFiles != nil && c.newFiles("runs/"+path), "new file runs/%s", path)
				}
			}
		})
	}
}
