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
// columns. Only the pages holding those rows of those columns are fetched
// (range reads through storage.ReaderAt), so a sampler reads a small share
// of a large corpus. Rows come back in the order of idx. Partial reads
// cannot be checked against the file's sha256; every decode error names the
// file and row.
func ReadRowsAt[P any](ctx context.Context, s storage.Store, m *Manifest, idx []int64) ([]P, error) {
	type loc struct {
		file  int
		local int64
		pos   int
	}
	locs := make([]loc, len(idx))
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
		locs[i] = loc{file: f, local: g - starts[f], pos: i}
	}
	sort.Slice(locs, func(a, b int) bool {
		if locs[a].file != locs[b].file {
			return locs[a].file < locs[b].file
		}
		return locs[a].local < locs[b].local
	})
	out := make([]P, len(idx))
	var (
		curFile = -1
		rd      *parquet.GenericReader[P]
	)
	defer func() {
		if rd != nil {
			_ = rd.Close()
		}
	}()
	buf := make([]P, 1)
	for _, l := range locs {
		fe := m.Files[l.file]
		if l.file != curFile {
			if rd != nil {
				_ = rd.Close()
			}
			ra, err := storage.NewReaderAt(ctx, s, fe.Key)
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", fe.Key, err)
			}
			if ra.Size() != fe.Bytes {
				return nil, fmt.Errorf("%s: %w: %d bytes, manifest says %d", fe.Key, ErrIntegrity, ra.Size(), fe.Bytes)
			}
			f, err := parquet.OpenFile(ra, ra.Size(), parquet.SkipBloomFilters(true), parquet.ReadBufferSize(64<<10))
			if err != nil {
				return nil, fmt.Errorf("%s: corrupt parquet: %w", fe.Key, err)
			}
			rd = parquet.NewGenericReader[P](f)
			curFile = l.file
		}
		if err := rd.SeekToRow(l.local); err != nil {
			return nil, fmt.Errorf("%s: seek to row %d: %w", fe.Key, l.local, err)
		}
		n, err := rd.Read(buf)
		if n != 1 {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%s: read row %d: %w", fe.Key, l.local, err)
		}
		out[l.pos] = buf[0]
	}
	return out, nil
}
