package datasets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spade-pipeline/spade/schemas"
)

func TestImportJSONL(t *testing.T) {
	nested := ImportOptions{IDPath: "paper_id", TitlePath: "metadata.title", LicensePath: "metadata.license",
		DomainPath: "discipline", TextPaths: []string{"abstract.text", "body_text[].text"}}
	with := func(o ImportOptions, f func(*ImportOptions)) ImportOptions { f(&o); return o }
	tests := []struct {
		name      string
		data      string
		opts      ImportOptions
		wantIDs   []string
		wantTexts []string
		wantTitle string // title of the first doc
		wantErr   error
		errHas    string
		skips     []string // substrings of Issues, in order
		dups      int64
		repaired  int64
	}{
		{
			name: "nested paths concatenate in order",
			data: `{"paper_id":"p1","metadata":{"title":"T1","license":"CC0"},"discipline":"Physics","abstract":{"text":"Abs."},"body_text":[{"text":"One."},{"text":"  "},{"text":"Two."}]}` + "\n",
			opts: nested, wantIDs: []string{"p1"}, wantTexts: []string{"Abs.\n\nOne.\n\nTwo."}, wantTitle: "T1",
		},
		{
			name: "missing optional is empty, missing required skips",
			data: `{"paper_id":"p1","metadata":{"title":"T"},"abstract":{"text":"a"},"body_text":[]}
{"metadata":{"title":"no id"},"abstract":{"text":"b"}}
{"paper_id":"p3","metadata":{}}
{"paper_id":"p4","abstract":{"text":" "},"body_text":[]}
`,
			opts:    with(nested, func(o *ImportOptions) { o.LicensePath, o.DomainPath = "", "" }),
			wantIDs: []string{"p1"}, wantTexts: []string{"a"}, wantTitle: "T",
			skips: []string{":2 field paper_id: required id field is missing", ":3 field abstract.text, body_text[].text: required text field is missing", ":4 field abstract.text, body_text[].text: text is empty"},
		},
		{
			name:    "a misspelt path fails the file",
			data:    `{"paper_id":"p1","metadata":{"title":"T"},"abstract":{"text":"a"}}` + "\n",
			opts:    with(nested, func(o *ImportOptions) { o.TitlePath = "metadata.titel" }),
			wantErr: ErrFieldPathUnmatched, errHas: `title path "metadata.titel" matched none of 1 rows`,
		},
		{
			name: "dedup by text hash keeps the first; ids default to the hash",
			data: `{"text":"same"}
{"text":"other"}
{"text":"same"}
`,
			wantIDs:   []string{"0967115f2813a3541eaef77de9d9d5773f1c0c04314b0bbfe4ff3b3b1c55b5d5"[:16], "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"[:16]},
			wantTexts: []string{"same", "other"}, dups: 1,
		},
		{
			name:    "reused id with another text is skipped",
			data:    `{"id":"x","text":"one"}` + "\n" + `{"id":"x","text":"two"}` + "\n",
			opts:    ImportOptions{IDPath: "id"},
			wantIDs: []string{"x"}, wantTexts: []string{"one"},
			skips: []string{`:2 field id: doc id "x" was already imported from`},
		},
		{
			name:    "numeric id and list text",
			data:    `{"id":7,"text":["a","b"]}` + "\n",
			opts:    ImportOptions{IDPath: "id"},
			wantIDs: []string{"7"}, wantTexts: []string{"a\n\nb"},
		},
		{
			name:    "bad lines are skipped with their line number",
			data:    "{\"id\":\"a\",\"text\":\"ok\"}\nnot json\n\n[1,2]\n{\"id\":\"b\",\"text\":{\"o\":1}}\n{\"id\":[\"c\",\"d\"],\"text\":\"t\"}\n",
			opts:    ImportOptions{IDPath: "id"},
			wantIDs: []string{"a"}, wantTexts: []string{"ok"},
			skips: []string{":2: not a JSON object: invalid character", ":4: not a JSON object: line holds a JSON array", ":5 field text: text field: value is an object", ":6 field id: id field matched 2 values"},
		},
		{
			name:    "invalid UTF-8 in text skips the row naming the field",
			data:    "{\"id\":\"a\",\"title\":\"fine\",\"text\":\"bad \xff byte\"}\n{\"id\":\"b\",\"title\":\"caf\xe9\",\"text\":\"good\"}\n{\"id\":\"c\",\"title\":\"ok\",\"text\":\"good too\"}\n",
			opts:    ImportOptions{IDPath: "id", TitlePath: "title"},
			wantIDs: []string{"c"}, wantTexts: []string{"good too"}, wantTitle: "ok",
			skips: []string{":1 field text: text field is not valid UTF-8", ":2 field title: title field is not valid UTF-8"},
		},
		{
			name:    "invalid UTF-8 in an unused field does not matter",
			data:    "{\"id\":\"a\",\"junk\":\"\xff\",\"text\":\"t\"}\n",
			opts:    ImportOptions{IDPath: "id"},
			wantIDs: []string{"a"}, wantTexts: []string{"t"},
		},
		{
			name:    "size cap",
			data:    `{"id":"big","text":"` + strings.Repeat("x", 101) + `"}` + "\n" + `{"id":"ok","text":"` + strings.Repeat("x", 100) + `"}` + "\n",
			opts:    ImportOptions{IDPath: "id", MaxDocBytes: 100},
			wantIDs: []string{"ok"}, wantTexts: []string{strings.Repeat("x", 100)},
			skips: []string{":1 field text: text is 101 bytes, over the cap of 100 bytes (MaxDocBytes)"},
		},
		{
			name:    "line cap skips while reading",
			data:    `{"id":"huge","text":"` + strings.Repeat("y", 5000) + `"}` + "\n" + `{"id":"ok","text":"fine"}` + "\n",
			opts:    ImportOptions{IDPath: "id", MaxDocBytes: 100, MaxLineBytes: 1000},
			wantIDs: []string{"ok"}, wantTexts: []string{"fine"},
			skips: []string{":1: line is 5024 bytes, over the line cap of 1000 bytes (MaxLineBytes)"},
		},
		{
			name:    "repair of a scrubbed escape",
			data:    `{"id":"r","text":"Name\user@example.org\nLab"}` + "\n",
			opts:    ImportOptions{IDPath: "id"},
			wantIDs: []string{"r"}, wantTexts: []string{"Name\\user@example.org\nLab"}, repaired: 1,
		},
		{
			name:    "strict JSON skips instead of repairing",
			data:    `{"id":"r","text":"Name\user@example.org"}` + "\n" + `{"id":"s","text":"fine"}` + "\n",
			opts:    ImportOptions{IDPath: "id", StrictJSON: true},
			wantIDs: []string{"s"}, wantTexts: []string{"fine"},
			skips: []string{`:1: not a JSON object: invalid character 's' in \u hexadecimal character escape`},
		},
		{
			name:    "the default line cap names MaxDocBytes and the flag",
			data:    `{"id":"huge","text":"` + strings.Repeat("y", 500) + `"}` + "\n" + `{"id":"ok","text":"fine"}` + "\n",
			opts:    ImportOptions{IDPath: "id", MaxDocBytes: 100},
			wantIDs: []string{"ok"}, wantTexts: []string{"fine"},
			skips: []string{":1: line is 524 bytes, over the line cap of 400 bytes (4 x MaxDocBytes, set with --max-doc-bytes; raise that to read longer lines)"},
		},
		{
			name:    "a file whose only line is over the line cap says so",
			data:    `{"text":"` + strings.Repeat("y", 500) + `"}` + "\n",
			opts:    ImportOptions{MaxDocBytes: 100},
			wantErr: ErrNoParsableRows,
			errHas:  "none of 1 lines could be decoded as a JSON object; the first: line 1: line is 512 bytes, over the line cap of 400 bytes (4 x MaxDocBytes, set with --max-doc-bytes",
		},
		{
			name:    "every row skipped fails listing the reasons",
			data:    `{"text":""}` + "\n" + `{"text":"  "}` + "\n",
			wantErr: ErrNoDocuments,
			errHas:  "import produced no documents (2 rows read, 2 skipped):\n  skipped ",
		},
		{
			name: "a lone surrogate escape skips the row naming the field, never becomes U+FFFD",
			data: `{"id":"a","text":"t4\ud800x"}
{"id":"b","title":"\udc00","text":"t"}
{"id":"c","title":"\ud83d\ude00 pair","junk":"\ud800","text":"x \\ud800"}
`,
			opts:    ImportOptions{IDPath: "id", TitlePath: "title"},
			wantIDs: []string{"c"}, wantTexts: []string{`x \ud800`}, wantTitle: "\U0001F600 pair",
			skips: []string{`:1 field text: text field holds a \u escape of a lone UTF-16 surrogate`, `:2 field title: title field holds a \u escape of a lone UTF-16 surrogate`},
		},
		{
			name: "numbers are written in plain decimal",
			data: `{"id":1e20,"text":"a"}
{"id":7.0,"text":"b"}
{"id":-2.50E-3,"text":"c"}
{"id":123456789012345678901234567890,"text":"d"}
{"id":1e5000,"text":"e"}
{"id":"x","text":[1.5e2,0.25]}
`,
			opts:    ImportOptions{IDPath: "id"},
			wantIDs: []string{"100000000000000000000", "7", "-0.0025", "123456789012345678901234567890", "x"}, wantTexts: []string{"a", "b", "c", "d", "150\n\n0.25"},
			skips: []string{":5 field id: id field: number 1e5000 has an exponent beyond ±1000"},
		},
		{name: "empty file", data: "", wantErr: ErrEmptyInput, errHas: "file is empty"},
		{name: "blank lines only", data: "\n \n\r\n", wantErr: ErrEmptyInput, errHas: "no non-blank lines"},
		{name: "no line parses", data: "a,b\n1,2\n", wantErr: ErrNoParsableRows, errHas: "none of 2 lines could be decoded as a JSON object; the first: line 1: not a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "in.jsonl", []byte(tc.data))
			opts := tc.opts
			opts.Paths = []string{p}
			docs, rep, err := collect(t, opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err = %v, want %v containing %q and the file name", err, tc.wantErr, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkAccounting(t, docs, rep)
			var ids, texts []string
			for _, d := range docs {
				ids = append(ids, d.DocID)
				texts = append(texts, d.Text)
				if d.Source != "in.jsonl" {
					t.Errorf("source = %q", d.Source)
				}
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.wantIDs) || fmt.Sprint(texts) != fmt.Sprint(tc.wantTexts) {
				t.Errorf("ids %q texts %q, want %q %q", ids, texts, tc.wantIDs, tc.wantTexts)
			}
			if tc.wantTitle != "" && docs[0].Title != tc.wantTitle {
				t.Errorf("title = %q, want %q", docs[0].Title, tc.wantTitle)
			}
			if len(rep.Issues) != len(tc.skips) {
				t.Fatalf("issues = %v, want %d", rep.Issues, len(tc.skips))
			}
			for i, s := range tc.skips {
				if got := rep.Issues[i].String(); !strings.HasPrefix(got, p) || !strings.Contains(got, s) {
					t.Errorf("issue %d = %q, want it to name %s and contain %q", i, got, p, s)
				}
			}
			if rep.Duplicates != tc.dups || rep.Repaired != tc.repaired {
				t.Errorf("duplicates %d repaired %d, want %d %d", rep.Duplicates, rep.Repaired, tc.dups, tc.repaired)
			}
		})
	}
}

func TestImportGzip(t *testing.T) {
	dir := t.TempDir()
	plain := []byte(`{"text":"one"}` + "\n" + `{"text":"two"}` + "\n")
	gz := gzipBytes(t, plain)
	t.Run("ok", func(t *testing.T) {
		docs, _, err := collect(t, ImportOptions{Paths: []string{writeFile(t, dir, "a.jsonl.gz", gz)}})
		if err != nil || len(docs) != 2 || docs[1].Text != "two" || docs[0].Source != "a.jsonl.gz" {
			t.Fatalf("docs %v err %v", docs, err)
		}
	})
	t.Run("gzip content under a plain name is still read", func(t *testing.T) {
		docs, _, err := collect(t, ImportOptions{Paths: []string{writeFile(t, dir, "b.jsonl", gz)}})
		if err != nil || len(docs) != 2 {
			t.Fatalf("docs %v err %v", docs, err)
		}
	})
	cases := []struct {
		name, file string
		data       []byte
		errHas     string
	}{
		{"truncated", "t.jsonl.gz", gz[:len(gz)-12], "line 3: corrupt input: unexpected EOF"},
		{"corrupt body", "c.jsonl.gz", append(append([]byte{}, gz[:12]...), make([]byte, 40)...), "corrupt input"},
		{"not gzip at all", "n.jsonl.gz", plain, "name ends in .gz but the data is not gzip"},
		{"bad header", "h.jsonl.gz", []byte{0x1f, 0x8b, 0, 0}, "gzip header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, tc.file, tc.data)
			_, _, err := collect(t, ImportOptions{Paths: []string{p}})
			if !errors.Is(err, ErrCorruptInput) || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want ErrCorruptInput naming %s and containing %q", err, p, tc.errHas)
			}
		})
	}
}

// TestImportDirLinksAndSpecialFiles: a symbolic link to a regular .txt or
// .md file is imported like the file; a dangling link, a link to a
// directory and a FIFO are skipped rows naming the file and why. They were
// all left out without a word.
func TestImportDirLinksAndSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	writeFile(t, dir, "a.txt", []byte("Plain text a.\n"))
	writeFile(t, outside, "real.md", []byte("# Linked\n\nBody of the linked file.\n"))
	for link, target := range map[string]string{
		"b.md":  filepath.Join(outside, "real.md"),
		"c.txt": filepath.Join(outside, "missing.txt"),
		"d.txt": outside,
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "e.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, rep, err := collect(t, ImportOptions{Paths: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, docs, rep)
	if len(docs) != 2 || docs[0].Text != "Plain text a." || docs[1].Title != "Linked" {
		t.Fatalf("docs %+v", docs)
	}
	want := []string{
		"c.txt: a symbolic link that cannot be followed:",
		"d.txt: a symbolic link to a directory, not a regular file",
		"e.txt: a FIFO, not a regular file",
	}
	if len(rep.Issues) != len(want) || rep.Skipped != 3 || rep.Read != 5 {
		t.Fatalf("read %d skipped %d issues %v", rep.Read, rep.Skipped, rep.Issues)
	}
	for i, w := range want {
		if got := rep.Issues[i].String(); !strings.Contains(got, w) {
			t.Errorf("issue %d = %q, want %q", i, got, w)
		}
	}
}

func TestImportDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a/one.md", []byte("---\nid: doc-one\ndomain: physics\nlicense: CC0-1.0\n---\nIntro line\n\n# Heading One\n\nBody of one.\n"))
	writeFile(t, dir, "a/two.txt", []byte("# not a heading in txt\nPlain text two.\n"))
	writeFile(t, dir, "b/setext.markdown", []byte("Setext Title\n============\n\nBody.\n"))
	writeFile(t, dir, "b/ignored.csv", []byte("x,y\n"))
	writeFile(t, dir, "c/dup.md", []byte("# not a heading in txt\nPlain text two.\n\n"))
	writeFile(t, dir, "c/bad.md", []byte("caf\xe9"))
	writeFile(t, dir, "c/empty.txt", []byte("  \n"))
	writeFile(t, dir, "d/big.txt", []byte(strings.Repeat("z", 200)))
	writeFile(t, dir, "d/fm.md", []byte("---\ntitle: [unclosed\n---\nbody"))

	docs, rep, err := collect(t, ImportOptions{Paths: []string{dir}, MaxDocBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, docs, rep)
	type row struct{ id, title, domain, license, text string }
	var got []row
	for _, d := range docs {
		got = append(got, row{d.DocID, d.Title, d.Domain, d.License, d.Text})
		if d.Source != filepath.Base(dir) {
			t.Errorf("source %q, want %q", d.Source, filepath.Base(dir))
		}
	}
	want := []row{
		{"doc-one", "Heading One", "physics", "CC0-1.0", "Intro line\n\n# Heading One\n\nBody of one."},
		{docs[1].SHA256[:16], "two", "", "", "# not a heading in txt\nPlain text two."},
		{docs[2].SHA256[:16], "Setext Title", "", "", "Setext Title\n============\n\nBody."},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	wantIssues := []string{"c/bad.md field text: text is not valid UTF-8", "c/empty.txt field text: text is empty",
		"d/big.txt field text: over the size cap: file is 200 bytes, over the cap of 100 bytes", "d/fm.md field text: front matter:"}
	if len(rep.Issues) != len(wantIssues) {
		t.Fatalf("issues %v", rep.Issues)
	}
	for i, w := range wantIssues {
		if !strings.Contains(rep.Issues[i].String(), w) {
			t.Errorf("issue %d = %q, want %q", i, rep.Issues[i], w)
		}
	}
	// c/dup.md has the same text as a/two.txt once trimmed.
	if rep.Duplicates != 1 || rep.Read != 8 {
		t.Errorf("duplicates %d read %d", rep.Duplicates, rep.Read)
	}

	t.Run("empty directory", func(t *testing.T) {
		empty := t.TempDir()
		writeFile(t, empty, "x.csv", []byte("a"))
		_, _, err := collect(t, ImportOptions{Paths: []string{empty}})
		if !errors.Is(err, ErrEmptyInput) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestImportInputErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.jsonl", []byte(`{"text":"x"}`+"\n"))
	tests := []struct {
		name    string
		opts    ImportOptions
		wantErr error
		errHas  string
	}{
		{"no paths", ImportOptions{}, ErrBadOptions, "no input paths"},
		{"unknown format", ImportOptions{Paths: []string{good}, Format: "csv"}, ErrBadOptions, `unknown format "csv"`},
		{"bad path syntax", ImportOptions{Paths: []string{good}, TextPaths: []string{"a..b"}}, ErrBadFieldPath, "text"},
		{"missing file", ImportOptions{Paths: []string{filepath.Join(dir, "nope.jsonl")}}, fs.ErrNotExist, "nope.jsonl"},
		{"dir format on a file", ImportOptions{Paths: []string{good}, Format: FormatDir}, ErrBadOptions, "is a file"},
		{"jsonl format on a dir", ImportOptions{Paths: []string{dir}, Format: FormatJSONL}, ErrBadOptions, "is a directory"},
		{"unknown content", ImportOptions{Paths: []string{writeFile(t, dir, "x.bin", []byte("\x00\x01junk"))}}, ErrBadOptions, "cannot tell the format"},
		{"second file fails after first", ImportOptions{Paths: []string{good, writeFile(t, dir, "empty.jsonl", nil)}}, ErrEmptyInput, "empty.jsonl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := collect(t, tc.opts)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.errHas)
			}
		})
	}
}

func TestImportAcrossFilesDedupAndOrder(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.jsonl", []byte(`{"text":"shared"}`+"\n"+`{"text":"only a"}`+"\n"))
	b := writeFile(t, dir, "b.ndjson", []byte(`{"text":"only b"}`+"\n"+`{"text":"shared"}`+"\n"))
	run := func() []schemas.CorpusDoc {
		docs, rep, err := collect(t, ImportOptions{Paths: []string{a, b}, Source: "mix"})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Duplicates != 1 || rep.Files != 2 {
			t.Fatalf("report %+v", rep)
		}
		return docs
	}
	first, second := run(), run()
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatal("two imports of the same input differ")
	}
	var texts []string
	for _, d := range first {
		texts = append(texts, d.Text)
		if d.Source != "mix" {
			t.Errorf("source %q", d.Source)
		}
	}
	if strings.Join(texts, "|") != "shared|only a|only b" {
		t.Fatalf("order %q", texts)
	}
}

func TestImportEmitErrorAndCancel(t *testing.T) {
	p := writeFile(t, t.TempDir(), "in.jsonl", []byte(`{"text":"a"}`+"\n"+`{"text":"b"}`+"\n"))
	stop := errors.New("stop")
	n := 0
	_, err := Import(context.Background(), ImportOptions{Paths: []string{p}}, func(schemas.CorpusDoc) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 || !strings.Contains(err.Error(), "in.jsonl:1") {
		t.Fatalf("err = %v after %d emits", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Import(ctx, ImportOptions{Paths: []string{p}}, func(schemas.CorpusDoc) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestImportIssueCap(t *testing.T) {
	var b strings.Builder
	for i := 0; i < MaxReportedIssues+50; i++ {
		b.WriteString("oops\n")
	}
	b.WriteString(`{"text":"one good line"}` + "\n")
	p := writeFile(t, t.TempDir(), "many.jsonl", []byte(b.String()))
	docs, rep, err := collect(t, ImportOptions{Paths: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, docs, rep)
	if rep.Skipped != MaxReportedIssues+50 || len(rep.Issues) != MaxReportedIssues {
		t.Fatalf("skipped %d, listed %d", rep.Skipped, len(rep.Issues))
	}
}

// TestImportHugeMaxDocBytes: a MaxDocBytes past math.MaxInt64/4 gives the
// largest line cap, not 4 x MaxDocBytes wrapped around (--max-doc-bytes
// 9223372036854775807 made the cap -4 bytes and skipped every line).
func TestImportHugeMaxDocBytes(t *testing.T) {
	p := writeFile(t, t.TempDir(), "two.jsonl", []byte(`{"text":"one"}`+"\n"+`{"text":"two"}`+"\n"))
	for _, max := range []int64{math.MaxInt64, math.MaxInt64/4 + 1, 1 << 62} {
		docs, rep, err := collect(t, ImportOptions{Paths: []string{p}, MaxDocBytes: max})
		if err != nil {
			t.Fatalf("MaxDocBytes %d: %v", max, err)
		}
		checkAccounting(t, docs, rep)
		if len(docs) != 2 {
			t.Fatalf("MaxDocBytes %d: %d documents, want 2 (%v)", max, len(docs), rep.Issues)
		}
	}
}

func TestImportNoDocuments(t *testing.T) {
	var b strings.Builder
	for i := 0; i < NoDocumentsListed+2; i++ {
		b.WriteString(`{"text":""}` + "\n")
	}
	p := writeFile(t, t.TempDir(), "blank.jsonl", []byte(b.String()))
	_, rep, err := collect(t, ImportOptions{Paths: []string{p}})
	var nd *NoDocumentsError
	if !errors.Is(err, ErrNoDocuments) || !errors.As(err, &nd) {
		t.Fatalf("err = %v, want a *NoDocumentsError", err)
	}
	if nd.Report.Skipped != 12 || len(nd.Report.Issues) != 12 || rep.Skipped != 12 {
		t.Fatalf("report %+v", nd.Report)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != NoDocumentsListed+2 || lines[0] != "import produced no documents (12 rows read, 12 skipped):" {
		t.Fatalf("message %q", err)
	}
	for i, l := range lines[1 : NoDocumentsListed+1] {
		if want := fmt.Sprintf("  skipped %s:%d field text: text is empty", p, i+1); l != want {
			t.Errorf("line %d = %q, want %q", i+1, l, want)
		}
	}
	if last := lines[len(lines)-1]; last != "  ... and 2 more skipped rows" {
		t.Errorf("last line %q", last)
	}

	// A row imported from any input means success.
	good := writeFile(t, t.TempDir(), "good.jsonl", []byte(`{"text":"ok"}`+"\n"))
	if _, _, err := collect(t, ImportOptions{Paths: []string{p, good}}); err != nil {
		t.Fatal(err)
	}
}

func TestRowIssueString(t *testing.T) {
	for _, tc := range []struct {
		is   RowIssue
		want string
	}{
		{RowIssue{File: "a.jsonl", Line: 3, Field: "abstract.text, body_text[].text", Reason: "text is empty"}, "a.jsonl:3 field abstract.text, body_text[].text: text is empty"},
		{RowIssue{File: "a.jsonl", Line: 1, Reason: "not a JSON object: line holds a JSON array, not an object"}, "a.jsonl:1: not a JSON object: line holds a JSON array, not an object"},
		{RowIssue{File: "docs/x.md", Field: "text", Reason: "text is empty"}, "docs/x.md field text: text is empty"},
		{RowIssue{File: "docs/x.md", Reason: "r"}, "docs/x.md: r"},
	} {
		if got := tc.is.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestImportMissingFileIsPathError(t *testing.T) {
	_, _, err := collect(t, ImportOptions{Paths: []string{"/nonexistent/corpus.jsonl"}})
	var pe *os.PathError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *os.PathError", err)
	}
}

// TestImportOptionsCheck: Check and CheckPath refuse, without reading
// rows, what Import refuses for the options alone or for a path the
// format does not fit, with the same errors.
func TestImportOptionsCheck(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.jsonl", []byte(`{"text":"x"}`+"\n"))
	for _, tc := range []struct {
		opts   ImportOptions
		option string
		is     error
		msg    string
	}{
		{ImportOptions{Format: "csv"}, "format", ErrBadOptions, `bad import options: format: unknown format "csv" (want auto, jsonl, parquet or dir)`},
		{ImportOptions{TextPaths: []string{"ok", "a..b"}}, "text", ErrBadFieldPath, `bad import options: text: bad field path: "a..b": empty key at offset 2`},
		{ImportOptions{TextPaths: []string{""}}, "text", ErrBadOptions, "bad import options: text: empty field path"},
		{ImportOptions{IDPath: "x[", Format: FormatJSONL}, "id", ErrBadFieldPath, `bad import options: id: bad field path: "x[": unterminated '[' at offset 1`},
		{ImportOptions{DomainPath: "]"}, "domain", ErrBadFieldPath, "bad import options: domain: bad field path"},
	} {
		err := tc.opts.Check()
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != tc.option || !errors.Is(err, ErrBadOptions) || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
			t.Fatalf("Check(%+v) = %v, want an *OptionError for %s matching %v containing %q", tc.opts, err, tc.option, tc.is, tc.msg)
		}
		// Import says the same.
		tc.opts.Paths = []string{good}
		if _, _, ierr := collect(t, tc.opts); ierr == nil || ierr.Error() != err.Error() {
			t.Fatalf("Import(%+v) = %v, want %v", tc.opts, ierr, err)
		}
	}
	for _, ok := range []ImportOptions{{}, {Format: FormatJSONL, IDPath: "a.b[].c", TextPaths: []string{"x", "y[0]"}}} {
		if err := ok.Check(); err != nil {
			t.Fatalf("Check(%+v) = %v", ok, err)
		}
		if err := ok.CheckPath(good); err != nil {
			t.Fatalf("CheckPath(%+v) = %v", ok, err)
		}
	}
	for _, c := range []struct {
		opts ImportOptions
		p    string
		is   error
	}{
		{ImportOptions{Format: FormatDir}, good, ErrBadOptions},
		{ImportOptions{Format: FormatParquet}, dir, ErrBadOptions},
		{ImportOptions{}, writeFile(t, dir, "x.bin", []byte("\x00\x01junk")), ErrBadOptions},
		{ImportOptions{}, filepath.Join(dir, "nope"), fs.ErrNotExist},
	} {
		if err := c.opts.CheckPath(c.p); !errors.Is(err, c.is) {
			t.Fatalf("CheckPath(%+v, %s) = %v, want %v", c.opts, c.p, err, c.is)
		}
	}
}
