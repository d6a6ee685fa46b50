package table_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// fill sets every field of v to a deterministic pseudo-random value. Row i
// of a table gets: nil lists when i%3==0, empty lists when i%3==1; nil
// optional pointers when i%2==0 and pointers to the zero value otherwise.
func fill(v reflect.Value, r *rand.Rand, i int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%05d-%d", i, r.IntN(1000)))
	case reflect.Int64:
		v.SetInt(int64(r.IntN(1 << 20)))
	case reflect.Float64:
		v.SetFloat(r.Float64())
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Pointer:
		if i%2 == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem())) // zero value: must stay non-NULL
	case reflect.Slice:
		switch i % 3 {
		case 0:
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + r.IntN(3)
			s := reflect.MakeSlice(v.Type(), n, n)
			for j := 0; j < n; j++ {
				fill(s.Index(j), r, i+j+2) // +2 keeps nested lists non-nil
			}
			v.Set(s)
		}
	case reflect.Struct:
		for f := 0; f < v.NumField(); f++ {
			fill(v.Field(f), r, i)
		}
	}
}

func rowsOf[T any](n int) []T {
	r := rand.New(rand.NewPCG(1, 2))
	rows := make([]T, n)
	for i := range rows {
		fill(reflect.ValueOf(&rows[i]).Elem(), r, i)
	}
	return rows
}

func checkTable[T any](t *testing.T, tb schemas.Table[T]) {
	t.Run(tb.Name, func(t *testing.T) {
		const n = 300
		rows := rowsOf[T](n)
		a, err := table.Encode(tb, append([]T(nil), rows...))
		require.NoError(t, err)
		b, err := table.Encode(tb, append([]T(nil), rows...))
		require.NoError(t, err)
		require.Equal(t, sha256.Sum256(a), sha256.Sum256(b), "same rows must give byte-identical files")

		// Reader 1: parquet-go, exact round trip including nil vs empty lists.
		got, info, err := table.Decode(tb, tb.Name, a)
		require.NoError(t, err)
		require.EqualValues(t, n, info.Rows)
		sorted := append([]T(nil), rows...)
		table.Sort(tb, sorted)
		require.True(t, reflect.DeepEqual(sorted, got), "parquet-go round trip differs")

		// Reader 2: arrow-go.
		pf, err := file.NewParquetReader(bytes.NewReader(a))
		require.NoError(t, err)
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		require.NoError(t, err)
		at, err := fr.ReadTable(context.Background())
		require.NoError(t, err)
		defer at.Release()
		require.EqualValues(t, n, at.NumRows())
		require.EqualValues(t, tb.RowType.NumField(), at.NumCols())

		// Reader 3: DuckDB; NULL lists/pointers only where the Go value is nil.
		path := filepath.Join(t.TempDir(), tb.Name+".parquet")
		require.NoError(t, os.WriteFile(path, a, 0o644))
		db, err := sql.Open("duckdb", "")
		require.NoError(t, err)
		defer db.Close()
		var count int64
		require.NoError(t, db.QueryRow(fmt.Sprintf("select count(*) from read_parquet('%s')", path)).Scan(&count))
		require.EqualValues(t, n, count)
		for f := 0; f < tb.RowType.NumField(); f++ {
			ft := tb.RowType.Field(f)
			if ft.Type.Kind() != reflect.Slice && ft.Type.Kind() != reflect.Pointer {
				continue
			}
			col := tb.Schema.Fields()[f].Name()
			var nulls, empties int64
			q := fmt.Sprintf(`select count(*) filter (where "%s" is null) from read_parquet('%s')`, col, path)
			require.NoError(t, db.QueryRow(q).Scan(&nulls))
			wantNulls, wantEmpty := 0, 0
			for i := range sorted {
				fv := reflect.ValueOf(&sorted[i]).Elem().Field(f)
				if fv.IsNil() {
					wantNulls++
				} else if fv.Kind() == reflect.Slice && fv.Len() == 0 {
					wantEmpty++
				}
			}
			require.EqualValues(t, wantNulls, nulls, "NULLs in %s.%s", tb.Name, col)
			if ft.Type.Kind() == reflect.Slice {
				q = fmt.Sprintf(`select count(*) filter (where len("%s") = 0) from read_parquet('%s')`, col, path)
				require.NoError(t, db.QueryRow(q).Scan(&empties))
				require.EqualValues(t, wantEmpty, empties, "empty lists in %s.%s", tb.Name, col)
			}
		}
	})
}

// TestEveryTableThreeReaders writes every table kind and reads it back with
// parquet-go, arrow-go and DuckDB (issue: tables read by three readers).
func TestEveryTableThreeReaders(t *testing.T) {
	checkTable(t, schemas.Corpus)
	checkTable(t, schemas.Slots)
	checkTable(t, schemas.Designs)
	checkTable(t, schemas.Validations)
	checkTable(t, schemas.Environments)
	checkTable(t, schemas.Hints)
	checkTable(t, schemas.Rollouts)
	checkTable(t, schemas.Labels)
	checkTable(t, schemas.Memory)
	checkTable(t, schemas.Pool)
	checkTable(t, schemas.TrainBatch)
	checkTable(t, schemas.TrainMetrics)
	checkTable(t, schemas.Checkpoints)
	checkTable(t, schemas.Metrics)
	checkTable(t, schemas.Evals)
	checkTable(t, schemas.LLMCalls)
	require.Len(t, schemas.All(), 16, "a new table kind must be added to this test")
}

func TestDecodeCorrupt(t *testing.T) {
	good, err := table.Encode(schemas.Slots, rowsOf[schemas.Slot](50))
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"empty":     {},
		"truncated": good[:len(good)/2],
		"garbage":   []byte("PAR1 this is not parquet PAR1"),
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := table.Decode(schemas.Slots, "x.parquet", data)
			require.ErrorIs(t, err, table.ErrCorrupt)
			require.Contains(t, err.Error(), "x.parquet")
		})
	}
}

// TestTextColumnsCarryNoBounds: a 1 MiB action is stored once (compressed),
// not again as page and footer min/max statistics, while the key column
// env_id keeps its bounds for row group pruning.
func TestTextColumnsCarryNoBounds(t *testing.T) {
	big := string(bytes.Repeat([]byte("a"), 1<<20))
	rows := []schemas.Rollout{
		{EnvID: "env-b", Actions: []string{big}},
		{EnvID: "env-a", Actions: []string{"x"}},
	}
	data, err := table.Encode(schemas.Rollouts, rows)
	require.NoError(t, err)
	// 1 MiB of one byte compresses to a few hundred bytes; each uncompressed
	// statistics copy would add 1 MiB.
	require.Less(t, len(data), 64<<10, "file is %d bytes", len(data))

	r, err := file.NewParquetReader(bytes.NewReader(data))
	require.NoError(t, err)
	defer r.Close()
	rg := r.MetaData().RowGroup(0)
	for i := range rg.NumColumns() {
		col, err := rg.ColumnChunk(i)
		require.NoError(t, err)
		name := col.PathInSchema().String()
		stats, err := col.Statistics()
		require.NoError(t, err)
		switch name {
		case "env_id":
			require.NotNil(t, stats, name)
			require.True(t, stats.HasMinMax(), "key column %s lost its bounds", name)
		case "actions.list.element":
			if stats != nil {
				require.False(t, stats.HasMinMax(), "text column %s has bounds", name)
			}
		}
	}

	// DuckDB still reads both rows back, and filters on the key.
	dir := t.TempDir()
	path := filepath.Join(dir, "r.parquet")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	defer db.Close()
	var n, l int64
	require.NoError(t, db.QueryRow(fmt.Sprintf(
		"SELECT count(*), max(length(actions[1])) FROM read_parquet('%s') WHERE env_id >= 'env-a'", path)).Scan(&n, &l))
	require.Equal(t, int64(2), n)
	require.Equal(t, int64(1<<20), l)
}
