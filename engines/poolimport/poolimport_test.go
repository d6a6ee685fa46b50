package poolimport_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/poolimport"
	"github.com/spade-pipeline/spade/engines/prompt"
)

// TestReadImport checks what Read reads and refuses: a directory in
// lexical order with ids under it, gzip JSONL, default ids, skills from
// the column, later copies of a source listed as duplicates whatever their
// ids; and every bad input named by file, row and field.
func TestReadImport(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	put := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	put("envs/b.py", []byte("class B: pass\n"))
	put("envs/a/z.py", []byte("class Z: pass\n"))
	put("envs/notes.txt", []byte("not python"))
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte(`{"source": "class J: pass\n", "skill": "planning"}` + "\n\n" + `{"id": "again", "source": "class B: pass"}` + "\n"))
	require.NoError(t, w.Close())
	jl := put("rows.jsonl.gz", gz.Bytes())

	got, rep, err := poolimport.Read(ctx, poolimport.Options{Paths: []string{filepath.Join(dir, "envs"), jl}, Format: poolimport.FormatAuto})
	require.NoError(t, err)
	require.Equal(t, 3, rep.Files)
	require.Equal(t, 4, rep.Read)
	require.Len(t, got, 3)
	require.Equal(t, []string{"a/z.py", "b.py", "rows.jsonl.gz#1"}, []string{got[0].ID, got[1].ID, got[2].ID})
	require.Equal(t, "planning", got[2].Skill)
	require.Equal(t, prompt.EnvID("class J: pass\n"), got[2].EnvID)
	require.Equal(t, []string{jl + " row 3: same source as b.py (env_id " + got[1].EnvID + ")"}, rep.Duplicates)
	require.Equal(t, poolimport.Digest(got), poolimport.Digest(append([]poolimport.Entry(nil), got...)))

	type row struct {
		Code string `parquet:"code"`
	}
	noSource := filepath.Join(dir, "nosource.parquet")
	require.NoError(t, parquet.WriteFile(noSource, []row{{Code: "x"}}))
	for name, tc := range map[string]struct {
		paths []string
		want  string
		path  bool
	}{
		"missing path":      {[]string{filepath.Join(dir, "nope.jsonl")}, "no such file or directory", true},
		"unknown extension": {[]string{put("x.csv", []byte("a"))}, "cannot tell the format from the name", true},
		"no py file":        {[]string{filepath.Join(dir, "empty")}, "the directory holds no *.py file", false},
		"malformed line":    {[]string{put("m.jsonl", []byte("{\"source\": \"x\"}\n{nope\n"))}, "m.jsonl row 2: bad pool input", false},
		"not an object":     {[]string{put("n.jsonl", []byte("[1]\n"))}, "n.jsonl row 1: bad pool input: line holds a JSON array, not an object", false},
		"empty source":      {[]string{put("e.jsonl", []byte("{\"source\": \"  \\n\"}\n"))}, "e.jsonl row 1: field source: bad pool input: empty", false},
		"skill not string":  {[]string{put("s.jsonl", []byte("{\"source\": \"x\", \"skill\": [1]}\n"))}, "s.jsonl row 1: field skill: bad pool input: want a string, got a list", false},
		"no source column":  {[]string{noSource}, "nosource.parquet: field source: bad pool input: the file has no source column", false},
		"corrupt parquet":   {[]string{put("c.parquet", []byte("PAR1 not really"))}, "c.parquet: bad pool input: corrupt Parquet", false},
		"only blank lines":  {[]string{put("blank.jsonl", []byte("\n\n"))}, "bad pool input: no environment found", false},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "no py file" {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, "empty"), 0o755))
			}
			_, _, err := poolimport.Read(ctx, poolimport.Options{Paths: tc.paths, Format: poolimport.FormatAuto})
			require.ErrorContains(t, err, tc.want)
			var pe *poolimport.PathError
			require.Equal(t, tc.path, errors.As(err, &pe), "%v", err)
			require.Equal(t, !tc.path, errors.Is(err, poolimport.ErrBadInput), "%v", err)
		})
	}
	_, _, err = poolimport.Read(ctx, poolimport.Options{Paths: []string{jl}, Format: "csv"})
	require.ErrorContains(t, err, `--format "csv": want auto, dir, py, jsonl or parquet`)
	_, _, err = poolimport.Read(ctx, poolimport.Options{Paths: []string{jl}, Format: poolimport.FormatDir})
	require.ErrorContains(t, err, "--format dir does not fit a file")
}

// TestReadImportRefusesSpecialFiles: a FIFO given as an input, one named
// *.py inside a directory, and a link to one are refused at once as path
// errors naming the file and its kind, instead of blocking in open with
// no writer (the corpus-import attack of issue 27).
func TestReadImportRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.jsonl")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	envs := filepath.Join(dir, "envs")
	require.NoError(t, os.MkdirAll(envs, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(envs, "a.py"), []byte("class A: pass\n"), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(envs, "b.py"), 0o600))
	linked := filepath.Join(dir, "linked")
	require.NoError(t, os.MkdirAll(linked, 0o755))
	require.NoError(t, os.Symlink(fifo, filepath.Join(linked, "c.py")))
	for _, c := range []struct{ path, named string }{{fifo, fifo}, {envs, filepath.Join(envs, "b.py")}, {linked, filepath.Join(linked, "c.py")}} {
		_, _, err := poolimport.Read(context.Background(), poolimport.Options{Paths: []string{c.path}, Format: poolimport.FormatAuto})
		var pe *poolimport.PathError
		require.True(t, errors.As(err, &pe), "%s: %v", c.path, err)
		require.ErrorContains(t, err, c.named+" is a FIFO, not a regular file or a directory")
	}
}
