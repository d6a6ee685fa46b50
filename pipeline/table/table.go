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
	"slices"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

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
	w := parquet.NewGenericWriter[T](&buf,
		parquet.Compression(&zstd.Codec{Level: ZstdLevel, Concurrency: 1}),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.PageBufferSize(PageBytes),
		parquet.CreatedBy(CreatedBy, CreatedByVersion, ""),
	)
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
	Rows      int64
	RowGroups int64
}

// Open opens a Parquet part file for reading by row group. name is used in
// errors. The file's schema must convert to the table's row type.
func Open[T any](t schemas.Table[T], name string, r io.ReaderAt, size int64) (*parquet.File, error) {
	f, err := parquet.OpenFile(r, size, parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrCorrupt, err)
	}
	return f, nil
}

// ReadRowGroup decodes row group i of f into rows of T.
func ReadRowGroup[T any](t schemas.Table[T], name string, f *parquet.File, i int) (rows []T, err error) {
	defer func() {
		// parquet-go can panic on some malformed inputs; a corrupt file is an
		// input error, never a crash.
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: row group %d: %w: %v", name, i, ErrCorrupt, p)
		}
	}()
	groups := f.RowGroups()
	if i < 0 || i >= len(groups) {
		return nil, fmt.Errorf("%s: row group %d out of range (%d groups)", name, i, len(groups))
	}
	rg := groups[i]
	rd := parquet.NewGenericRowGroupReader[T](rg)
	defer rd.Close()
	rows = make([]T, rg.NumRows())
	n, err := rd.Read(rows)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: row group %d: %w: %w", name, i, ErrCorrupt, err)
	}
	if int64(n) != rg.NumRows() {
		return nil, fmt.Errorf("%s: row group %d: %w: read %d of %d rows", name, i, ErrCorrupt, n, rg.NumRows())
	}
	return rows, nil
}

// Decode reads every row of a Parquet file. name is used in errors.
func Decode[T any](t schemas.Table[T], name string, data []byte) ([]T, FileInfo, error) {
	f, err := Open(t, name, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, FileInfo{}, err
	}
	var out []T
	n := len(f.RowGroups())
	for i := 0; i < n; i++ {
		rows, err := ReadRowGroup(t, name, f, i)
		if err != nil {
			return nil, FileInfo{}, err
		}
		out = append(out, rows...)
	}
	return out, FileInfo{Rows: f.NumRows(), RowGroups: int64(n)}, nil
}
