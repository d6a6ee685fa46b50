package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// rowsDoc is the full row type of the small-layout test table: flat
// strings, an int, and a repeated column, so seeks cross page boundaries of
// both flat and repeated columns.
type rowsDoc struct {
	ID   string   `parquet:"id"`
	N    int64    `parquet:"n"`
	Tags []string `parquet:"tags,optional,list"`
	Body string   `parquet:"body"`
}

// rowsRef is a projection of rowsDoc (a subset of its columns, out of
// order).
type rowsRef struct {
	Tags []string `parquet:"tags,optional,list"`
	ID   string   `parquet:"id"`
}

func refOf(d rowsDoc) rowsRef { return rowsRef{Tags: d.Tags, ID: d.ID} }

// smallLayoutTable writes a table whose files have many small row groups
// (groupRows rows each, except the last) of several small pages, and
// returns its manifest and every row in global order. sizes gives each
// file's row count.
func smallLayoutTable(t testing.TB, st storage.Store, sizes []int, groupRows int) (*pipeline.Manifest, []rowsDoc) {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	m := &pipeline.Manifest{Run: "rows", Round: 0, Table: "docs"}
	var all []rowsDoc
	for f, n := range sizes {
		rows := make([]rowsDoc, n)
		for i := range rows {
			g := len(all) + i
			d := rowsDoc{ID: fmt.Sprintf("doc-%06d", g), N: int64(g), Body: strings.Repeat(string(rune('a'+r.IntN(26))), 1+r.IntN(40))}
			switch g % 3 {
			case 0: // nil list
			case 1:
				d.Tags = []string{}
			default:
				for j := range 1 + r.IntN(3) {
					d.Tags = append(d.Tags, fmt.Sprintf("t%d-%d", g, j))
				}
			}
			rows[i] = d
		}
		var buf bytes.Buffer
		w := parquet.NewGenericWriter[rowsDoc](&buf, parquet.MaxRowsPerRowGroup(int64(groupRows)), parquet.PageBufferSize(256))
		_, err := w.Write(rows)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		key := fmt.Sprintf("rows/docs/part-%05d.parquet", f)
		require.NoError(t, storage.PutBytes(ctx, st, key, buf.Bytes()))
		m.Files = append(m.Files, pipeline.FileEntry{Key: key, Bytes: int64(buf.Len()), Rows: int64(n), Part: f})
		m.Rows += int64(n)
		all = append(all, rows...)
	}
	return m, all
}

// fullRead reads every row of every file of m in order with a plain
// sequential parquet-go reader: the reference ReadRowsAt must agree with.
func fullRead[P any](t testing.TB, st storage.Store, m *pipeline.Manifest) []P {
	t.Helper()
	var out []P
	for _, fe := range m.Files {
		data, err := storage.ReadAll(context.Background(), st, fe.Key)
		require.NoError(t, err)
		rd := parquet.NewGenericReader[P](bytes.NewReader(data))
		rows := make([]P, fe.Rows)
		n, err := rd.Read(rows)
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
		}
		require.EqualValues(t, fe.Rows, n, fe.Key)
		require.NoError(t, rd.Close())
		out = append(out, rows...)
	}
	return out
}

func TestReadRowsAtMatchesFullRead(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	// Four files: several 40-row groups with a short last group, one file
	// of a single short group, one of exactly one full group.
	m, rows := smallLayoutTable(t, st, []int{250, 7, 40, 173}, 40)
	total := int64(len(rows))
	docs := fullRead[rowsDoc](t, st, m)
	refs := fullRead[rowsRef](t, st, m)
	require.Equal(t, rows, docs, "the reference read must see the written rows")
	for i := range rows {
		require.Equal(t, refOf(rows[i]), refs[i])
	}

	// Global indexes of the first and last row of every row group.
	var bounds []int64
	var base int64
	for _, fe := range m.Files {
		for s := int64(0); s < fe.Rows; s += 40 {
			bounds = append(bounds, base+s, base+min(s+40, fe.Rows)-1)
		}
		base += fe.Rows
	}
	r := rand.New(rand.NewPCG(9, 9))
	random := make([]int64, 300)
	for i := range random {
		random[i] = r.Int64N(total)
	}
	sorted := slices.Clone(random)
	slices.Sort(sorted)
	every := make([]int64, total)
	for i := range every {
		every[i] = total - 1 - int64(i)
	}
	oneGroup := []int64{3, 17, 4, 39, 0, 38, 21, 22, 23}
	cases := map[string][]int64{
		"empty":              {},
		"first":              {0},
		"last":               {total - 1},
		"first and last":     {total - 1, 0},
		"random":             random,
		"sorted":             sorted,
		"duplicates":         {5, 5, 300, 5, 299, 300, 300, 0, 5},
		"group boundaries":   bounds,
		"one group, shuffle": oneGroup,
		"cross file":         {249, 250, 256, 257, 296, 297, 469, 0},
		"every row reversed": every,
		"adjacent run":       {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111},
	}
	for name, idx := range cases {
		t.Run(name, func(t *testing.T) {
			gotDocs, err := pipeline.ReadRowsAt[rowsDoc](ctx, st, m, idx)
			require.NoError(t, err)
			gotRefs, err := pipeline.ReadRowsAt[rowsRef](ctx, st, m, idx)
			require.NoError(t, err)
			require.Len(t, gotDocs, len(idx))
			require.Len(t, gotRefs, len(idx))
			for i, g := range idx {
				require.Equal(t, docs[g], gotDocs[i], "idx[%d] = row %d", i, g)
				require.Equal(t, refs[g], gotRefs[i], "idx[%d] = row %d (projection)", i, g)
			}
		})
	}
}

func TestReadRowsAtErrors(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	m, _ := smallLayoutTable(t, st, []int{50, 50}, 20)
	for _, g := range []int64{-1, 100} {
		_, err := pipeline.ReadRowsAt[rowsRef](ctx, st, m, []int64{0, g})
		require.ErrorContains(t, err, fmt.Sprintf("row %d out of range", g))
	}

	// A file whose size differs from the manifest's is an integrity error
	// naming the key.
	bad := *m
	bad.Files = slices.Clone(m.Files)
	bad.Files[1].Bytes++
	_, err := pipeline.ReadRowsAt[rowsRef](ctx, st, &bad, []int64{3, 60})
	require.ErrorIs(t, err, pipeline.ErrIntegrity)
	require.ErrorContains(t, err, m.Files[1].Key)

	// So is a row count that differs from the manifest's.
	bad.Files = slices.Clone(m.Files)
	bad.Files[0].Rows = 60
	_, err = pipeline.ReadRowsAt[rowsRef](ctx, st, &bad, []int64{55})
	require.ErrorIs(t, err, pipeline.ErrIntegrity)
	require.ErrorContains(t, err, m.Files[0].Key)

	// A projection whose values do not convert is an error naming the key
	// and the row within the file.
	type wrongType struct {
		ID int64 `parquet:"id"`
	}
	_, err = pipeline.ReadRowsAt[wrongType](ctx, st, m, []int64{61})
	require.Error(t, err)
	require.ErrorContains(t, err, m.Files[1].Key)
	require.ErrorContains(t, err, "row 11")

	// Garbled page bytes (same size, so the size check passes) give an
	// error naming the key, never a panic or silently wrong rows.
	data, err := storage.ReadAll(ctx, st, m.Files[1].Key)
	require.NoError(t, err)
	for i := 4; i < len(data)/2; i++ {
		data[i] ^= 0x5a
	}
	require.NoError(t, storage.PutBytes(ctx, st, "rows/docs/garbled.parquet", data))
	bad.Files = slices.Clone(m.Files)
	bad.Files[1].Key = "rows/docs/garbled.parquet"
	_, err = pipeline.ReadRowsAt[rowsDoc](ctx, st, &bad, []int64{50, 51, 70, 99})
	require.Error(t, err)
	require.ErrorContains(t, err, "rows/docs/garbled.parquet")

	// A missing file names its key.
	bad.Files = slices.Clone(m.Files)
	bad.Files[1].Key = "rows/docs/missing.parquet"
	_, err = pipeline.ReadRowsAt[rowsRef](ctx, st, &bad, []int64{70})
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.ErrorContains(t, err, "rows/docs/missing.parquet")

	// Garbage where a part file should be.
	bad.Files = slices.Clone(m.Files)
	require.NoError(t, storage.PutBytes(ctx, st, "rows/docs/garbage.parquet", []byte("PAR1 not parquet at all PAR1")))
	bad.Files[1] = pipeline.FileEntry{Key: "rows/docs/garbage.parquet", Bytes: 28, Rows: 50}
	_, err = pipeline.ReadRowsAt[rowsRef](ctx, st, &bad, []int64{70})
	require.Error(t, err)
	require.ErrorContains(t, err, "rows/docs/garbage.parquet")

	// A cancelled context stops the reads.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = pipeline.ReadRowsAt[rowsRef](cctx, st, m, []int64{70})
	require.True(t, errors.Is(err, context.Canceled), "err = %v", err)
}

// readCost reads rows idx of m as T through a counting store, checks that
// each row is the one asked for (docID also runs any other per-row check),
// and returns the store traffic the read cost.
func readCost[T any](t *testing.T, st storage.Store, m *pipeline.Manifest, idx []int64, docID func(T) string) storage.Counts {
	t.Helper()
	cs := storage.Counting(st)
	got, err := pipeline.ReadRowsAt[T](context.Background(), cs, m, idx)
	require.NoError(t, err)
	for i, g := range idx {
		require.Equal(t, fmt.Sprintf("gen-%07d", g), docID(got[i]))
	}
	return cs.Counts()
}

// corpusDocRef is the sample stage's projection of the corpus.
type corpusDocRef struct {
	DocID  string `parquet:"doc_id"`
	Domain string `parquet:"domain"`
}

// corpusDocText is the design stage's projection: it includes the large
// text column, which spans several pages per row group.
type corpusDocText struct {
	DocID  string `parquet:"doc_id"`
	Title  string `parquet:"title"`
	Domain string `parquet:"domain"`
	Text   string `parquet:"text"`
}

var corpusDomains = []string{"Mathematics", "physics", "cs", "biology", "economics", "chemistry"}

// corpusTable commits a corpus table in the project's own layout
// (table.Encode: 8,192-row groups, 1 MiB pages, zstd) as files of
// perFile rows each, docs of textBytes of word-like text, and returns its
// manifest.
func corpusTable(t testing.TB, st storage.Store, files, perFile, textBytes int) *pipeline.Manifest {
	t.Helper()
	ctx := context.Background()
	m := &pipeline.Manifest{Run: "rows", Round: 0, Table: "corpus"}
	for f := range files {
		docs := make([]schemas.CorpusDoc, perFile)
		for i := range docs {
			g := f*perFile + i
			r := rand.New(rand.NewPCG(11, uint64(g)))
			var sb strings.Builder
			for sb.Len() < textBytes {
				fmt.Fprintf(&sb, "w%d ", r.IntN(5000))
			}
			docs[i] = schemas.CorpusDoc{
				DocID: fmt.Sprintf("gen-%07d", g), Source: "test", Title: fmt.Sprintf("title %d", r.IntN(1e6)),
				Domain: corpusDomains[r.IntN(len(corpusDomains))], Text: sb.String(), License: "CC0-1.0",
				SHA256: fmt.Sprintf("%064x", r.Uint64()),
			}
		}
		data, err := table.Encode(schemas.Corpus, docs)
		require.NoError(t, err)
		key := fmt.Sprintf("rows/corpus/part-%05d.parquet", f)
		require.NoError(t, storage.PutBytes(ctx, st, key, data))
		m.Files = append(m.Files, pipeline.FileEntry{Key: key, Bytes: int64(len(data)), Rows: int64(perFile), RowGroups: int64((perFile + table.RowGroupRows - 1) / table.RowGroupRows), Part: f})
		m.Rows += int64(perFile)
		m.Bytes += int64(len(data))
	}
	return m
}

// projectedChunkBytes returns the compressed size in bytes of the named
// columns' chunks in row group rg of the file at key.
func projectedChunkBytes(t testing.TB, st storage.Store, key string, rg int, cols ...string) int64 {
	t.Helper()
	data, err := storage.ReadAll(context.Background(), st, key)
	require.NoError(t, err)
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	var n int64
	for _, c := range f.Metadata().RowGroups[rg].Columns {
		if slices.Contains(cols, strings.Join(c.MetaData.PathInSchema, ".")) {
			n += c.MetaData.TotalCompressedSize
		}
	}
	require.Positive(t, n)
	return n
}

// TestReadRowsAtBytesBoundedPerRowGroup checks that taking more rows from
// one row group does not read more bytes than the row group's projected
// column chunks: each chunk is fetched about once, not once per row.
func TestReadRowsAtBytesBoundedPerRowGroup(t *testing.T) {
	st := memStore(t)
	const perFile = 2 * table.RowGroupRows
	m := corpusTable(t, st, 1, perFile, 200)
	chunk := projectedChunkBytes(t, st, m.Files[0].Key, 1, "doc_id", "domain")

	cost := func(idx []int64) storage.Counts {
		return readCost(t, st, m, idx, func(d corpusDocRef) string { return d.DocID })
	}
	// Rows all in row group 1 (global rows 8192..16383).
	r := rand.New(rand.NewPCG(5, 6))
	draw := func(k int) []int64 {
		idx := make([]int64, k)
		for i := range idx {
			idx[i] = table.RowGroupRows + r.Int64N(table.RowGroupRows)
		}
		return idx
	}
	one := cost(draw(1))
	t.Logf("1 row: %d bytes, %d requests; projected chunks of the row group: %d bytes", one.BytesRead, one.Requests(), chunk)
	for _, k := range []int{2, 20, 200, 2000} {
		c := cost(draw(k))
		t.Logf("%d rows: %d bytes, %d requests", k, c.BytesRead, c.Requests())
		// Growth beyond one row's cost is at most the projected chunks read
		// once more (a dictionary page and its chunk are fetched through
		// separate buffers), never proportional to k.
		require.LessOrEqual(t, c.BytesRead, one.BytesRead+chunk, "%d rows from one row group", k)
		require.LessOrEqual(t, c.Requests(), one.Requests()+4, "%d rows from one row group", k)
	}

	// With the text column (several 1 MiB pages per row group), many rows
	// cost at most the projected chunks of the group once more than one row.
	textChunk := projectedChunkBytes(t, st, m.Files[0].Key, 1, "doc_id", "title", "domain", "text")
	textCost := func(idx []int64) storage.Counts {
		return readCost(t, st, m, idx, func(d corpusDocText) string {
			require.NotEmpty(t, d.Text)
			return d.DocID
		})
	}
	one = textCost(draw(1))
	t.Logf("text, 1 row: %d bytes, %d requests; projected chunks of the row group: %d bytes", one.BytesRead, one.Requests(), textChunk)
	for _, k := range []int{20, 2000} {
		c := textCost(draw(k))
		t.Logf("text, %d rows: %d bytes, %d requests", k, c.BytesRead, c.Requests())
		require.LessOrEqual(t, c.BytesRead, one.BytesRead+textChunk, "%d rows from one row group", k)
	}
}

// BenchmarkReadRowsAt reads random rows of a corpus in the project's layout
// (4 files x 4 row groups of 8,192 rows, 300-byte texts) from the memory
// store and reports store requests and bytes read per call, for the sample
// stage's projection (doc_id, domain) and the design stage's (with text).
// The 300-row case has the density of the 2,400-row corpus benchmark (~19
// rows per row group).
func BenchmarkReadRowsAt(b *testing.B) {
	ctx := context.Background()
	st := memstore.New("bench-read-rows-at")
	m := corpusTable(b, st, 4, 4*table.RowGroupRows, 300)
	for _, k := range []int{24, 300, 2400} {
		for _, proj := range []string{"ref", "text"} {
			b.Run(fmt.Sprintf("rows=%d/%s", k, proj), func(b *testing.B) {
				r := rand.New(rand.NewPCG(uint64(k), 1))
				idx := make([]int64, k)
				for i := range idx {
					idx[i] = r.Int64N(m.Rows)
				}
				cs := storage.Counting(st)
				b.ResetTimer()
				for range b.N {
					var err error
					if proj == "ref" {
						_, err = pipeline.ReadRowsAt[corpusDocRef](ctx, cs, m, idx)
					} else {
						_, err = pipeline.ReadRowsAt[corpusDocText](ctx, cs, m, idx)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				c := cs.Counts()
				b.ReportMetric(float64(c.Requests())/float64(b.N), "requests/op")
				b.ReportMetric(float64(c.BytesRead)/float64(b.N), "bytes/op")
				b.ReportMetric(100*float64(c.BytesRead)/float64(b.N)/float64(m.Bytes), "%corpus/op")
			})
		}
	}
}
