// Package table encodes and decodes the rows of one table kind as Parquet
// files with a fixed, reproducible layout: rows sorted by the table key,
// a fixed row-group size, zstd at a fixed level, and a pinned created_by,
// so the same rows always give byte-identical files (docs/format.md).
package table

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/spade-pipeline/spade/pipeline/internal/parallel"
	"github.com/spade-pipeline/spade/schemas"
)

// Layout constants of every part file. Changing any of them changes file
// bytes, so they are part of the storage format version (docs/format.md).
const (
	// RowGroupRows is the number of rows per Parquet row group.
	RowGroupRows = 8192
	// PageBytes is the target page buffer size in bytes.
	PageBytes = 1 << 20
	// ZstdLevel is the zstd level (SpeedDefault, level 3).
	ZstdLevel = zstd.SpeedDefault
	// CreatedBy is the pinned created_by application string: it does not
	// carry the build, so files do not change with the binary.
	CreatedBy = "spade"
	// CreatedByVersion is the pinned created_by version (the format version).
	CreatedByVersion = "1"
)

// ErrCorrupt wraps every decode failure of a part file.
var ErrCorrupt = errors.New("corrupt parquet")

// Sort orders rows by the table's key, stably, in place.
func Sort[T any](t schemas.Table[T], rows []T) {
	slices.SortStableFunc(rows, func(a, b T) int { return t.Compare(&a, &b) })
}

// Encode writes rows (sorted first, in place) as one Parquet file and
// returns its bytes. Errors come from the Parquet writer.
//
// The file is written into pooled chunks (chunkBuffer) and copied once
// into the result, instead of into a bytes.Buffer that re-zeroes and copies
// the whole output at every doubling; the bytes are the same.
func Encode[T any](t schemas.Table[T], rows []T) ([]byte, error) {
	Sort(t, rows)
	var buf chunkBuffer
	defer buf.release()
	opts := append([]parquet.WriterOption{
		parquet.Compression(&zstd.Codec{Level: ZstdLevel, Concurrency: 1}),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.PageBufferSize(PageBytes),
		parquet.CreatedBy(CreatedBy, CreatedByVersion, ""),
	}, skipTextStats(t.Info)...)
	w := parquet.NewGenericWriter[T](&buf, opts...)
	for start := 0; start < len(rows); start += RowGroupRows {
		end := min(start+RowGroupRows, len(rows))
		if _, err := w.Write(rows[start:end]); err != nil {
			return nil, fmt.Errorf("encode %s: %w", t.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", t.Name, err)
	}
	return buf.Bytes(), nil
}

// skipTextStats returns the writer options that leave min/max statistics
// out for every string (BYTE_ARRAY) leaf column outside the table's key:
// no statistics in data page headers and no bounds in the footer's column
// chunk metadata (the column index keeps its 16-byte truncated bounds; a
// skipped column's are null). parquet-go writes such statistics untruncated,
// so a single 1 MiB response was stored about six more times in its file
// (page header min and max, chunk min and max, ...). Free text has no useful
// bounds; key columns (env_id, slot_id, ...) keep theirs for DuckDB's row
// group pruning. Depends on the schema only, so files stay byte-identical.
func skipTextStats(info schemas.Info) []parquet.WriterOption {
	var opts []parquet.WriterOption
	for _, path := range info.Schema.Columns() {
		leaf, ok := info.Schema.Lookup(path...)
		if !ok || leaf.Node.Type().Kind() != parquet.ByteArray || slices.Contains(info.Key, path[0]) {
			continue
		}
		opts = append(opts, parquet.SkipPageStatistics(path...), parquet.SkipPageBounds(path...))
	}
	return opts
}

// chunkSize is the size in bytes of chunkBuffer's chunks.
const chunkSize = 256 << 10

// chunkPool holds free chunks. Encoding one part after another reuses them,
// so the bytes of a large file are written into warm memory and copied once
// into the result, instead of into fresh memory at every doubling of a
// bytes.Buffer (each step re-zeroing and copying the whole output).
var chunkPool = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// chunkBuffer is an io.Writer that keeps what it is given in pooled
// fixed-size chunks, filled in order and never regrown. The zero value is
// ready to use; release returns the chunks to the pool.
type chunkBuffer struct {
	chunks []*[chunkSize]byte // all full except the last
	last   int                // bytes used in the last chunk
}

// Write appends p; it never fails.
func (b *chunkBuffer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(b.chunks) == 0 || b.last == chunkSize {
			b.chunks = append(b.chunks, chunkPool.Get().(*[chunkSize]byte))
			b.last = 0
		}
		k := copy(b.chunks[len(b.chunks)-1][b.last:], p)
		b.last += k
		p = p[k:]
	}
	return n, nil
}

// Bytes returns a new slice holding everything written, in order; it does
// not alias the chunks, so it stays valid after release.
func (b *chunkBuffer) Bytes() []byte {
	parts := make([][]byte, len(b.chunks))
	for i, c := range b.chunks {
		parts[i] = c[:]
	}
	if len(parts) > 0 {
		parts[len(parts)-1] = parts[len(parts)-1][:b.last]
	}
	return bytes.Join(parts, nil)
}

// release returns the chunks to the pool and empties b.
func (b *chunkBuffer) release() {
	for i, c := range b.chunks {
		chunkPool.Put(c)
		b.chunks[i] = nil
	}
	b.chunks, b.last = b.chunks[:0], 0
}

// FileInfo is what Decode learns about a file besides its rows.
type FileInfo struct {
	// Rows is the file's row count (its metadata, equal to the rows decoded).
	Rows int64
	// RowGroups is the number of row groups in the file.
	RowGroups int64
}

// Open opens a Parquet part file for reading by row group. name is used in
// errors. Open reads only the footer and does not compare the file's
// schema with the table's (t only fixes the row type for the caller); a
// schema that does not convert is found by ReadRowGroup, as ErrCorrupt.
// Errors: an unreadable footer, wrapping ErrCorrupt and naming the file.
func Open[T any](t schemas.Table[T], name string, r io.ReaderAt, size int64) (*parquet.File, error) {
	f, err := parquet.OpenFile(r, size, parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrCorrupt, err)
	}
	return f, nil
}

// ReadRowGroup decodes row group i of f into a new slice of its rows.
// Errors wrap ErrCorrupt and name the file, the row group and, where the
// failure is in a row, the row's index within the group; an i outside
// [0, len(f.RowGroups())) is an error that does not wrap ErrCorrupt.
func ReadRowGroup[T any](t schemas.Table[T], name string, f *parquet.File, i int) ([]T, error) {
	groups := f.RowGroups()
	if i < 0 || i >= len(groups) {
		return nil, fmt.Errorf("%s: row group %d out of range (%d groups)", name, i, len(groups))
	}
	n := groups[i].NumRows()
	rows, err := makeRows[T](n)
	if err != nil {
		return nil, fmt.Errorf("%s: row group %d: %w", name, i, err)
	}
	if err := readGroupInto(name, groups[i], i, rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// readBatchRows is how many rows readGroupInto asks the Parquet reader for
// at a time. The reader keeps one parquet.Row (every leaf value of a row)
// per requested row until the batch is reconstructed into Go values; a
// batch of a few hundred rows stays in cache, where a whole 8,192-row group
// of rollouts (about a hundred values a row) would be megabytes.
const readBatchRows = 256

// readGroupInto decodes row group rg (index i in file name) into dst, which
// must have exactly rg.NumRows() elements. It allocates only the reader's
// own buffers, which are dropped when it returns. A panic of the Parquet
// reader on malformed input is returned as an ErrCorrupt error.
func readGroupInto[T any](name string, rg parquet.RowGroup, i int, dst []T) (err error) {
	done := 0
	defer func() {
		// parquet-go can panic on some malformed inputs; a corrupt file is an
		// input error, never a crash.
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: row group %d: near row %d: %w: %v", name, i, done, ErrCorrupt, p)
		}
	}()
	rd := parquet.NewGenericRowGroupReader[T](rg)
	defer rd.Close()
	for done < len(dst) {
		n, err := rd.Read(dst[done:min(done+readBatchRows, len(dst))])
		done += n
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: row group %d: row %d: %w: %w", name, i, done, ErrCorrupt, err)
		}
		if n == 0 || err != nil {
			break
		}
	}
	if done != len(dst) {
		return fmt.Errorf("%s: row group %d: %w: read %d of %d rows", name, i, ErrCorrupt, done, len(dst))
	}
	return nil
}

// makeRows allocates n zero rows; a count no slice can hold (from a corrupt
// footer) is an ErrCorrupt error, not a panic.
func makeRows[T any](n int64) (rows []T, err error) {
	defer func() {
		if p := recover(); p != nil {
			rows, err = nil, fmt.Errorf("%w: %d rows: %v", ErrCorrupt, n, p)
		}
	}()
	if n < 0 || n > math.MaxInt {
		return nil, fmt.Errorf("%w: %d rows", ErrCorrupt, n)
	}
	return make([]T, n), nil
}

// Decode reads every row of a Parquet file, in file order. name (the file's
// key) is used in errors. Row groups are decoded concurrently on up to
// GOMAXPROCS goroutines (DecodeWorkers); the rows, their order and every
// value (nil and empty lists included) are the same as a sequential decode.
// Errors wrap ErrCorrupt and name the file, and the row group and row where
// known; when several row groups are corrupt, the first one's error is
// returned, whatever the scheduling.
func Decode[T any](t schemas.Table[T], name string, data []byte) ([]T, FileInfo, error) {
	return DecodeWorkers(t, name, data, runtime.GOMAXPROCS(0))
}

// DecodeWorkers is Decode on at most workers goroutines: min(workers, row
// groups) goroutines each decode whole row groups, the next one not yet
// taken, straight into that group's range of the result, so besides the
// result at most one row group's reader buffers per goroutine are live.
// workers <= 1 decodes one row group after another on the calling
// goroutine. Errors are Decode's: each wraps ErrCorrupt and names the file
// (an unreadable footer, row counts that overflow or disagree with the
// footer, a bad row group or row); with several bad row groups the
// lowest-numbered one's error is returned, whatever workers is.
func DecodeWorkers[T any](t schemas.Table[T], name string, data []byte, workers int) ([]T, FileInfo, error) {
	f, err := Open(t, name, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, FileInfo{}, err
	}
	groups := f.RowGroups()
	// starts[i] is the index in the result of row group i's first row;
	// starts[len(groups)] is the total.
	starts := make([]int, len(groups)+1)
	for i, rg := range groups {
		n := rg.NumRows()
		if n < 0 || n > int64(math.MaxInt-starts[i]) {
			return nil, FileInfo{}, fmt.Errorf("%s: row group %d: %w: %d rows", name, i, ErrCorrupt, n)
		}
		starts[i+1] = starts[i] + int(n)
	}
	total := starts[len(groups)]
	if int64(total) != f.NumRows() {
		return nil, FileInfo{}, fmt.Errorf("%s: %w: row groups hold %d rows, footer says %d", name, ErrCorrupt, total, f.NumRows())
	}
	out, err := makeRows[T](int64(total))
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("%s: %w", name, err)
	}
	group := func(i int) error {
		return readGroupInto(name, groups[i], i, out[starts[i]:starts[i+1]])
	}
	if workers = min(workers, len(groups)); workers <= 1 {
		for i := range groups {
			if err := group(i); err != nil {
				return nil, FileInfo{}, err
			}
		}
	} else if err := parallel.Each(len(groups), workers, group); err != nil {
		return nil, FileInfo{}, err
	}
	return out, FileInfo{Rows: int64(total), RowGroups: int64(len(groups))}, nil
}
