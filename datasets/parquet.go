package datasets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// parquetBatchRows is how many rows are decoded at a time. Rows can be
// whole papers, so batches stay small; a row group is streamed page by
// page, never loaded whole.
const parquetBatchRows = 16

func (im *importer) importParquetFile(ctx context.Context, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("import %s: %w", p, err)
	}
	defer f.Close()
	im.rep.Files++
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("import %s: %w", p, err)
	}
	if st.Size() == 0 {
		return fmt.Errorf("import %s: %w: file is empty", p, ErrEmptyInput)
	}
	pf, err := openParquet(f, st.Size())
	if err != nil {
		return fmt.Errorf("import %s: %w: %w", p, ErrCorruptInput, err)
	}
	if pf.NumRows() == 0 {
		return fmt.Errorf("import %s: %w: Parquet file has no rows", p, ErrEmptyInput)
	}
	schema := pf.Schema()
	var rowNo, parsed int64
	buf := make([]parquet.Row, parquetBatchRows)
	for g, rg := range pf.RowGroups() {
		if err := im.readRowGroup(ctx, p, g, rg, schema, buf, &rowNo, &parsed); err != nil {
			return err
		}
	}
	return im.checkMatched(p, parsed)
}

// openParquet wraps parquet.OpenFile: a corrupt footer can make the
// decoder panic, and a bad file must be an error, not a crash.
func openParquet(r io.ReaderAt, size int64) (pf *parquet.File, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			pf, err = nil, fmt.Errorf("decode footer: %v", rec)
		}
	}()
	return parquet.OpenFile(r, size)
}

func (im *importer) readRowGroup(ctx context.Context, p string, g int, rg parquet.RowGroup, schema *parquet.Schema,
	buf []parquet.Row, rowNo, parsed *int64) (err error) {
	rows := rg.Rows()
	defer func() {
		if cerr := rows.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("import %s: row group %d: %w", p, g, cerr)
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := readRows(rows, buf)
		for i := 0; i < n; i++ {
			*rowNo++
			im.rep.Read++
			v, err := reconstruct(schema, buf[i])
			if err != nil {
				im.skip(p, *rowNo, "", fmt.Sprintf("cannot decode row: %v", err))
				continue
			}
			*parsed++
			if err := im.row(p, *rowNo, v, Marks{}); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("import %s: row group %d, after row %d: %w: %w", p, g, *rowNo, ErrCorruptInput, rerr)
		}
	}
}

// readRows is Rows.ReadRows with a decoder panic (corrupt page) turned
// into an error.
func readRows(rows parquet.Rows, buf []parquet.Row) (n int, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			n, err = 0, fmt.Errorf("decode page: %v", rec)
		}
	}()
	return rows.ReadRows(buf)
}

// reconstruct turns a row into nested map[string]any / list values that
// FieldPath.Extract walks.
func reconstruct(schema *parquet.Schema, row parquet.Row) (v any, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			v, err = nil, fmt.Errorf("reconstruct row: %v", rec)
		}
	}()
	m := make(map[string]any)
	if err := schema.Reconstruct(&m, row); err != nil {
		return nil, err
	}
	return m, nil
}
