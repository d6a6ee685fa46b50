package diff

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// column is one top-level column of a row type: its Parquet name and the
// struct field that holds it.
type column struct {
	name  string
	field int
}

// columnsOf lists the top-level Parquet columns of a row struct type in
// field order, using the same naming rule as parquet-go: the tag's first
// element, else the Go field name; "-" and unexported fields are skipped.
func columnsOf(t reflect.Type) []column {
	var out []column
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("parquet"); ok {
			first, _, _ := strings.Cut(tag, ",")
			if first == "-" {
				continue
			}
			if first != "" {
				name = first
			}
		}
		out = append(out, column{name: name, field: i})
	}
	return out
}

// RowFunc receives one decoded row: a pointer to a value of the table's
// row type, which the callee may keep.
type RowFunc func(row reflect.Value) error

// ReadRows decodes every row of the files m lists, in part order, into
// values of the table kind's Go row type (schemas.Info.RowType), calling fn
// for each. Each file's size and sha256 are checked against the manifest
// first (pipeline.ErrIntegrity). Errors name the file and row.
func ReadRows(ctx context.Context, s storage.Store, m *pipeline.Manifest, fn RowFunc) error {
	info, err := infoOf(m)
	if err != nil {
		return err
	}
	for _, fe := range m.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := pipeline.ReadVerified(ctx, s, fe)
		if err != nil {
			return err
		}
		if err := decodeFile(info, fe.Key, data, fn); err != nil {
			return err
		}
	}
	return nil
}

// infoOf finds the schema of a manifest's table kind and checks that this
// build reads that schema version.
func infoOf(m *pipeline.Manifest) (schemas.Info, error) {
	kind := m.Kind
	if kind == "" {
		kind = m.Table
	}
	info, ok := schemas.Lookup(kind)
	if !ok {
		return info, fmt.Errorf("table %s round %d: unknown table kind %q", m.Table, m.Round, kind)
	}
	if m.SchemaFingerprint != info.Fingerprint() {
		return info, fmt.Errorf("table %s round %d: schema fingerprint %.12s is not this build's %s v%d", m.Table, m.Round, m.SchemaFingerprint, info.Name, info.Version)
	}
	return info, nil
}

// checkFrame checks the Parquet framing ("PAR1", data, footer, footer
// length, "PAR1") before parquet-go sees the bytes: a corrupt footer
// length would otherwise make it allocate up to 4 GiB for the footer.
func checkFrame(data []byte) error {
	const magic = "PAR1"
	if len(data) < 12 || string(data[:4]) != magic || string(data[len(data)-4:]) != magic {
		return fmt.Errorf("not a Parquet file (%d bytes, no PAR1 header and footer)", len(data))
	}
	footer := int64(binary.LittleEndian.Uint32(data[len(data)-8:]))
	if footer > int64(len(data))-12 {
		return fmt.Errorf("footer length %d exceeds the file (%d bytes)", footer, len(data))
	}
	return nil
}

func decodeFile(info schemas.Info, key string, data []byte, fn RowFunc) (err error) {
	defer func() {
		// parquet-go can panic on malformed input; a corrupt file is an
		// input error, never a crash.
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: corrupt parquet: %v", key, p)
		}
	}()
	if err := checkFrame(data); err != nil {
		return fmt.Errorf("%s: corrupt parquet: %w", key, err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)), parquet.SkipBloomFilters(true))
	if err != nil {
		return fmt.Errorf("%s: corrupt parquet: %w", key, err)
	}
	rd := parquet.NewReader(f, info.Schema)
	defer func() { _ = rd.Close() }()
	buf := make([]parquet.Row, 256)
	var n int64
	for {
		k, rerr := rd.ReadRows(buf)
		for i := 0; i < k; i++ {
			v := reflect.New(info.RowType)
			if err := info.Schema.Reconstruct(v.Interface(), buf[i].Clone()); err != nil {
				return fmt.Errorf("%s: row %d: %w", key, n, err)
			}
			if err := fn(v); err != nil {
				return err
			}
			n++
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("%s: row %d: %w", key, n, rerr)
		}
		if k == 0 {
			return fmt.Errorf("%s: reader made no progress at row %d", key, n)
		}
	}
}
