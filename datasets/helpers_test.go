package datasets

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spade-pipeline/spade/schemas"
)

// collect runs Import and returns the emitted documents.
func collect(t *testing.T, opts ImportOptions) ([]schemas.CorpusDoc, ImportReport, error) {
	t.Helper()
	var docs []schemas.CorpusDoc
	rep, err := Import(context.Background(), opts, func(d schemas.CorpusDoc) error {
		docs = append(docs, d)
		return nil
	})
	return docs, rep, err
}

// writeFile writes data under dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func gzipBytes(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// checkAccounting asserts the report invariant and per-doc invariants.
func checkAccounting(t *testing.T, docs []schemas.CorpusDoc, rep ImportReport) {
	t.Helper()
	if rep.Read != rep.Imported+rep.Duplicates+rep.Skipped {
		t.Errorf("Read %d != Imported %d + Duplicates %d + Skipped %d", rep.Read, rep.Imported, rep.Duplicates, rep.Skipped)
	}
	if int64(len(docs)) != rep.Imported {
		t.Errorf("emitted %d docs, report says %d", len(docs), rep.Imported)
	}
	for _, d := range docs {
		if err := checkDoc(d); err != nil {
			t.Errorf("doc %s: %v", d.DocID, err)
		}
	}
}
