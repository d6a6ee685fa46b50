package datasets

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// hfPara and hfRow mimic a Hugging Face shard with nested columns: a
// struct column, a LIST column (three-level encoding, as pyarrow writes
// it) and a plain repeated group.
type hfPara struct {
	Section string `parquet:"section"`
	Text    string `parquet:"text"`
}

type hfMeta struct {
	Title   string `parquet:"title"`
	License string `parquet:"license,optional"`
}

type hfRow struct {
	ID       string   `parquet:"id"`
	Meta     hfMeta   `parquet:"meta"`
	Abstract string   `parquet:"abstract"`
	Body     []hfPara `parquet:"body,list"`
	Notes    []hfPara `parquet:"notes"`
	Tags     []string `parquet:"tags,list"`
	Year     int64    `parquet:"year"`
}

func writeParquet(t *testing.T, rows []hfRow, rowGroupRows int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[hfRow](&buf, parquet.MaxRowsPerRowGroup(int64(rowGroupRows)))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestImportParquet(t *testing.T) {
	var rows []hfRow
	for i := 0; i < 45; i++ {
		rows = append(rows, hfRow{
			ID:       fmt.Sprintf("doc-%02d", i),
			Meta:     hfMeta{Title: fmt.Sprintf("Title %d", i), License: "cc-by-4.0"},
			Abstract: fmt.Sprintf("Abstract %d.", i),
			Body:     []hfPara{{"intro", fmt.Sprintf("Body %d a.", i)}, {"end", fmt.Sprintf("Body %d b.", i)}},
			Notes:    []hfPara{{"n", fmt.Sprintf("Note %d.", i)}},
			Tags:     []string{"x", "y"},
			Year:     2000 + int64(i),
		})
	}
	rows[10].Meta.License = ""                                      // optional column null: empty license
	rows[20].Abstract = ""                                          // text still comes from the body
	rows[21].Body, rows[21].Notes, rows[21].Abstract = nil, nil, "" // no text at all: skipped
	rows[30] = rows[29]                                             // duplicate text and id
	dir := t.TempDir()
	// Row groups of 10 rows: the import streams five of them.
	p := writeFile(t, dir, "shard-00000.parquet", writeParquet(t, rows, 10))

	opts := ImportOptions{Paths: []string{p}, IDPath: "id", TitlePath: "meta.title", LicensePath: "meta.license",
		TextPaths: []string{"abstract", "body[].text", "notes[].text"}}
	docs, rep, err := collect(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, docs, rep)
	if rep.Read != 45 || rep.Imported != 43 || rep.Duplicates != 1 || rep.Skipped != 1 {
		t.Fatalf("report %+v", rep)
	}
	if got := rep.Issues[0].String(); !strings.Contains(got, "shard-00000.parquet:22 field abstract, body[].text, notes[].text: text is empty") {
		t.Errorf("issue = %q", got)
	}
	d := docs[0]
	if d.DocID != "doc-00" || d.Title != "Title 0" || d.License != "cc-by-4.0" || d.Text != "Abstract 0.\n\nBody 0 a.\n\nBody 0 b.\n\nNote 0." || d.Source != "shard-00000.parquet" {
		t.Errorf("doc 0 = %+v", d)
	}
	if docs[10].License != "" || docs[20].Text != "Body 20 a.\n\nBody 20 b.\n\nNote 20." {
		t.Errorf("doc 10 license %q, doc 20 text %q", docs[10].License, docs[20].Text)
	}
	for i := 1; i < len(docs); i++ {
		if docs[i-1].DocID >= docs[i].DocID {
			t.Fatalf("emitted out of input order at %d: %s then %s", i, docs[i-1].DocID, docs[i].DocID)
		}
	}

	t.Run("numbers and list leaves", func(t *testing.T) {
		docs, _, err := collect(t, ImportOptions{Paths: []string{p}, IDPath: "year", TitlePath: "tags[1]", TextPaths: []string{"tags"}})
		if err != nil {
			t.Fatal(err)
		}
		// Every row has tags "x","y": one document, the rest duplicates.
		if len(docs) != 1 || docs[0].DocID != "2000" || docs[0].Title != "y" || docs[0].Text != "x\n\ny" {
			t.Fatalf("docs %+v", docs)
		}
	})
	t.Run("misspelt column fails loudly", func(t *testing.T) {
		o := opts
		o.TitlePath = "meta.titel"
		_, _, err := collect(t, o)
		if !errors.Is(err, ErrFieldPathUnmatched) || !strings.Contains(err.Error(), `"meta.titel"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("corrupt and truncated files", func(t *testing.T) {
		data := writeParquet(t, rows, 10)
		garbled := append([]byte{}, data...)
		for i := 200; i < len(garbled)-200; i += 7 {
			garbled[i] ^= 0x5a
		}
		cases := []struct {
			name string
			data []byte
			want error
		}{
			{"empty", nil, ErrEmptyInput},
			{"truncated footer", data[:len(data)-9], ErrCorruptInput},
			{"cut in half", data[:len(data)/2], ErrCorruptInput},
			{"not parquet", []byte("PAR1 this is not a parquet file at all PAR1"), ErrCorruptInput},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := writeFile(t, t.TempDir(), "bad.parquet", tc.data)
				_, _, err := collect(t, ImportOptions{Paths: []string{p}, TextPaths: []string{"abstract"}})
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err = %v, want %v naming the file", err, tc.want)
				}
			})
		}
		// Garbled pages must give an error or skipped rows, never a panic
		// or a document that breaks the invariants.
		p := writeFile(t, t.TempDir(), "garbled.parquet", garbled)
		docs, rep, err := collect(t, ImportOptions{Paths: []string{p}, TextPaths: []string{"abstract"}})
		if err == nil {
			checkAccounting(t, docs, rep)
		} else if !strings.Contains(err.Error(), p) {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}
