package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// ReadRowsAt reads the rows at the given global row indexes (0-based, in
// the manifest's part order) of the table m lists, decoding them as P, a
// projection struct whose parquet tags name a subset of the table's
// columns. Rows come back in the order of idx: out[i] is row idx[i], and
// idx may repeat a row (each occurrence is decoded on its own, so no two
// results share memory).
//
// Only the pages holding those rows of those columns are fetched, by
// range reads through storage.ReaderAt, so a sampler reads a small share of
// a large corpus. The wanted rows are visited file by file and row group by
// row group; each row group touched is read through one reader of its own,
// so a page is fetched once however many wanted rows it holds, and pages
// between wanted rows are skipped (the files' offset indexes locate them).
// A row group with one wanted row costs one seek and a one-row read.
//
// Errors: an index outside [0, m.Rows) names the row; a part file whose
// size or row count differs from the manifest wraps ErrIntegrity and names
// its key; any open, seek or decode failure names the key and the row
// (local to the file). Partial reads cannot be checked against the file's
// sha256.
func ReadRowsAt[P any](ctx context.Context, s storage.Store, m *Manifest, idx []int64) ([]P, error) {
	locs := make([]rowLoc, len(idx))
	starts := make([]int64, len(m.Files))
	var total int64
	for i, f := range m.Files {
		starts[i] = total
		total += f.Rows
	}
	for i, g := range idx {
		if g < 0 || g >= total {
			return nil, fmt.Errorf("table %s round %d: row %d out of range (%d rows)", m.Table, m.Round, g, total)
		}
		f := sort.Search(len(starts), func(j int) bool { return starts[j] > g }) - 1
		locs[i] = rowLoc{file: f, local: g - starts[f], pos: i}
	}
	sort.Slice(locs, func(a, b int) bool {
		if locs[a].file != locs[b].file {
			return locs[a].file < locs[b].file
		}
		if locs[a].local != locs[b].local {
			return locs[a].local < locs[b].local
		}
		return locs[a].pos < locs[b].pos
	})
	out := make([]P, len(idx))
	for i := 0; i < len(locs); {
		j := i + 1
		for j < len(locs) && locs[j].file == locs[i].file {
			j++
		}
		if err := readFileRows(ctx, s, m.Files[locs[i].file], locs[i:j], out); err != nil {
			return nil, err
		}
		i = j
	}
	return out, nil
}

// rowLoc is one wanted row: its part file (index into Manifest.Files), its
// 0-based row within that file, and its position in the caller's idx.
type rowLoc struct {
	file  int
	local int64
	pos   int
}

// readFileRows decodes the rows locs names (all in part file fe, sorted by
// local row) into out at their positions. It opens the file once and reads
// each row group that holds wanted rows through its own reader.
func readFileRows[P any](ctx context.Context, s storage.Store, fe FileEntry, locs []rowLoc, out []P) error {
	ra, err := storage.NewReaderAt(ctx, s, fe.Key)
	if err != nil {
		return fmt.Errorf("open %s: %w", fe.Key, err)
	}
	if ra.Size() != fe.Bytes {
		return fmt.Errorf("%s: %w: %d bytes, manifest says %d", fe.Key, ErrIntegrity, ra.Size(), fe.Bytes)
	}
	f, err := parquet.OpenFile(ra, ra.Size(), parquet.SkipBloomFilters(true), parquet.ReadBufferSize(64<<10))
	if err != nil {
		return fmt.Errorf("%s: corrupt parquet: %w", fe.Key, err)
	}
	if f.NumRows() != fe.Rows {
		return fmt.Errorf("%s: %w: %d rows, manifest says %d", fe.Key, ErrIntegrity, f.NumRows(), fe.Rows)
	}
	var first int64 // the file's row index of the current row group's first row
	for _, rg := range f.RowGroups() {
		n := rg.NumRows()
		k := 0
		for k < len(locs) && locs[k].local < first+n {
			k++
		}
		if k > 0 {
			if err := readGroupRows(fe.Key, rg, first, locs[:k], out); err != nil {
				return err
			}
			locs = locs[k:]
		}
		if len(locs) == 0 {
			return nil
		}
		first += n
	}
	// Unreachable while the row count matches the manifest; kept so a
	// short file can never yield zero values silently.
	return fmt.Errorf("%s: read row %d: %w", fe.Key, locs[0].local, io.ErrUnexpectedEOF)
}

// readGroupRows decodes the rows locs names, all in row group rg whose
// first row is the file's row first, into out. One reader serves the whole
// group: each wanted row is a seek and a one-row read, and a seek to a row
// in the page the reader holds, or in bytes it has buffered, costs no
// fetch (nor does a seek to the row after the last one read).
func readGroupRows[P any](key string, rg parquet.RowGroup, first int64, locs []rowLoc, out []P) (err error) {
	cur := locs[0].local
	defer func() {
		// parquet-go panics on some malformed inputs and on a projection
		// that does not convert to the file's schema: an input error here,
		// never a crash.
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: read row %d: corrupt parquet or projection mismatch: %v", key, cur, p)
		}
	}()
	rd := parquet.NewGenericRowGroupReader[P](rg)
	defer func() { _ = rd.Close() }() // a read-only reader: Close only releases buffers
	buf := make([]P, 1)
	for _, l := range locs {
		cur = l.local
		if err := rd.SeekToRow(l.local - first); err != nil {
			return fmt.Errorf("%s: seek to row %d: %w", key, l.local, err)
		}
		n, err := rd.Read(buf)
		if n != 1 {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%s: read row %d: %w", key, l.local, err)
		}
		out[l.pos] = buf[0]
		var zero P
		buf[0] = zero
	}
	return nil
}
