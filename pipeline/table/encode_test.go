package table_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// corpusDocs returns n corpus documents sorted by doc_id, each with
// 1,000-2,000 bytes of text drawn word by word from a fixed pseudo-random
// vocabulary, so zstd finds no long repeats (the shape of a corpus part).
func corpusDocs(n int) []schemas.CorpusDoc {
	r := rand.New(rand.NewPCG(21, 22))
	vocab := make([]string, 4096)
	for i := range vocab {
		b := make([]byte, 3+r.IntN(8))
		for j := range b {
			b[j] = byte('a' + r.IntN(26))
		}
		vocab[i] = string(b)
	}
	domains := []string{"Mathematics", "physics", "cs", "biology", "economics"}
	docs := make([]schemas.CorpusDoc, n)
	for i := range docs {
		size := 1000 + r.IntN(1000)
		var sb strings.Builder
		for sb.Len() < size {
			sb.WriteString(vocab[r.IntN(len(vocab))])
			sb.WriteByte(' ')
		}
		text := sb.String()
		sum := sha256.Sum256([]byte(text))
		docs[i] = schemas.CorpusDoc{
			DocID: fmt.Sprintf("gen-%07d", i), Source: "bench", Title: vocab[r.IntN(len(vocab))],
			Domain: domains[r.IntN(len(domains))], Text: text, License: "CC0-1.0", SHA256: fmt.Sprintf("%x", sum),
		}
	}
	return docs
}

// TestEncodeLargeOutputStable encodes a table whose output spans many
// growth steps of the output buffer twice and checks the bytes are
// identical and decode to the rows.
func TestEncodeLargeOutputStable(t *testing.T) {
	docs := corpusDocs(table.RowGroupRows + 1000)
	a, err := table.Encode(schemas.Corpus, append([]schemas.CorpusDoc(nil), docs...))
	require.NoError(t, err)
	b, err := table.Encode(schemas.Corpus, append([]schemas.CorpusDoc(nil), docs...))
	require.NoError(t, err)
	require.True(t, bytes.Equal(a, b), "same rows must give byte-identical files")
	// The file's digest since string columns outside the key lost their
	// min/max statistics (skipTextStats). Only a change of what the
	// encoder writes (layout constants, writer options, parquet-go or
	// zstd) may change it, and then docs/format.md ("Parquet files") must
	// say so; the format version changes only if readers of version 1
	// could no longer read the files.
	require.Equal(t, "49b2420cecd945a67ffa5caaad55d07c5789dc768e1d93f1a6b18f89b026c51c", fmt.Sprintf("%x", sha256.Sum256(a)))
	require.Greater(t, len(a), 4<<20, "the output must be large enough to need several buffer chunks")
	got, info, err := table.Decode(schemas.Corpus, "corpus.parquet", a)
	require.NoError(t, err)
	require.EqualValues(t, len(docs), info.Rows)
	require.EqualValues(t, 2, info.RowGroups)
	require.Equal(t, docs, got)
}

// BenchmarkEncode encodes one corpus part of 62,500 documents (~94 MB of
// text; the part size of the 1,000,000-document corpus benchmark) and
// reports the output size.
func BenchmarkEncode(b *testing.B) {
	docs := corpusDocs(62_500)
	rows := make([]schemas.CorpusDoc, len(docs))
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		copy(rows, docs)
		var err error
		if out, err = table.Encode(schemas.Corpus, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(out))/1e6, "MB-out")
}

// BenchmarkEncodeSmall encodes a 100-row metrics table (a few KB of
// output): the size most tables of a round have.
func BenchmarkEncodeSmall(b *testing.B) {
	rows := rowsOf[schemas.Metric](100)
	in := make([]schemas.Metric, len(rows))
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		copy(in, rows)
		var err error
		if out, err = table.Encode(schemas.Metrics, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(out))/1e3, "KB-out")
}
