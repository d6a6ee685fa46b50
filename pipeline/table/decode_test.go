package table_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/bench"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// encodeGroups writes rows (in the given order) as a Parquet file with
// groupRows rows per row group and table.Encode's other settings, so tests
// can choose the number of row groups.
func encodeGroups[T any](t testing.TB, rows []T, groupRows int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf,
		parquet.Compression(&zstd.Codec{Level: table.ZstdLevel, Concurrency: 1}),
		parquet.MaxRowsPerRowGroup(groupRows),
		parquet.PageBufferSize(table.PageBytes),
		parquet.CreatedBy(table.CreatedBy, table.CreatedByVersion, ""),
	)
	_, err := w.Write(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// referenceDecode reads every row of data with parquet-go's whole-file
// reader, one row at a time: an independent sequential reference for Decode.
func referenceDecode[T any](t testing.TB, data []byte) []T {
	t.Helper()
	r := parquet.NewGenericReader[T](bytes.NewReader(data))
	defer r.Close()
	var out []T
	one := make([]T, 1)
	for {
		one[0] = *new(T)
		n, err := r.Read(one)
		if n == 1 {
			out = append(out, one[0])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	return out
}

// withGOMAXPROCS runs f with runtime.GOMAXPROCS(n), restoring it after.
func withGOMAXPROCS(n int, f func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	f()
}

// checkDecodeGroups encodes 640 rows of tb in 1, 2, 7 and 64 row groups and
// checks that Decode (at GOMAXPROCS 1 and 4) and DecodeWorkers (1 to 9
// workers, more than there are groups included) give exactly the rows of
// the sequential reference, nil and empty lists and nil pointers included,
// and that ReadRowGroup of each group concatenates to the same rows.
func checkDecodeGroups[T any](t *testing.T, tb schemas.Table[T]) {
	t.Run(tb.Name, func(t *testing.T) {
		const n = 640
		rows := rowsOf[T](n)
		for _, groups := range []int{1, 2, 7, 64} {
			t.Run(fmt.Sprintf("groups=%d", groups), func(t *testing.T) {
				data := encodeGroups(t, rows, int64((n+groups-1)/groups))
				want := referenceDecode[T](t, data)
				require.Len(t, want, n)
				require.True(t, reflect.DeepEqual(rows, want), "reference reader must round-trip the rows")
				for _, procs := range []int{1, 4} {
					withGOMAXPROCS(procs, func() {
						got, info, err := table.Decode(tb, "f.parquet", data)
						require.NoError(t, err)
						require.Equal(t, table.FileInfo{Rows: n, RowGroups: int64(groups)}, info)
						require.True(t, reflect.DeepEqual(want, got), "Decode at GOMAXPROCS %d differs from the reference", procs)
					})
				}
				for workers := 0; workers <= 9; workers++ {
					got, info, err := table.DecodeWorkers(tb, "f.parquet", data, workers)
					require.NoError(t, err)
					require.EqualValues(t, groups, info.RowGroups)
					require.True(t, reflect.DeepEqual(want, got), "DecodeWorkers(%d) differs from the reference", workers)
				}
				f, err := table.Open(tb, "f.parquet", bytes.NewReader(data), int64(len(data)))
				require.NoError(t, err)
				var cat []T
				for i := range groups {
					g, err := table.ReadRowGroup(tb, "f.parquet", f, i)
					require.NoError(t, err)
					cat = append(cat, g...)
				}
				require.True(t, reflect.DeepEqual(want, cat), "ReadRowGroup concatenation differs from the reference")
				_, err = table.ReadRowGroup(tb, "f.parquet", f, groups)
				require.ErrorContains(t, err, "out of range")
			})
		}
	})
}

// TestDecodeConcurrentMatchesSequential: row groups decoded concurrently
// give the same rows, in the same order, as a sequential reader, for
// tables with nested lists (rollouts), optional pointers (labels) and
// plain columns (metrics).
func TestDecodeConcurrentMatchesSequential(t *testing.T) {
	checkDecodeGroups(t, schemas.Rollouts)
	checkDecodeGroups(t, schemas.Labels)
	checkDecodeGroups(t, schemas.Metrics)
	checkDecodeGroups(t, schemas.Evals)
}

// TestDecodeEmpty: a file with no rows decodes to no rows and no error.
func TestDecodeEmpty(t *testing.T) {
	data, err := table.Encode(schemas.Rollouts, nil)
	require.NoError(t, err)
	for _, workers := range []int{1, 4} {
		got, info, err := table.DecodeWorkers(schemas.Rollouts, "e.parquet", data, workers)
		require.NoError(t, err)
		require.Empty(t, got)
		require.EqualValues(t, 0, info.Rows)
	}
}

// corruptGroup overwrites the middle of the first column chunk of row group
// g in a copy of data with 0xff bytes.
func corruptGroup(t *testing.T, data []byte, g int) []byte {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	md := f.Metadata().RowGroups[g].Columns[0].MetaData
	start := md.DataPageOffset
	size := md.TotalCompressedSize
	require.Greater(t, size, int64(64), "column chunk too small to corrupt")
	out := bytes.Clone(data)
	for i := start + size/2 - 16; i < start+size/2+16; i++ {
		out[i] = 0xff
	}
	return out
}

// TestDecodeCorruptRowGroup: a corrupt row group is reported as ErrCorrupt
// naming the file and that row group, by every worker count; with two
// corrupt groups the first one is reported, whatever the scheduling.
func TestDecodeCorruptRowGroup(t *testing.T) {
	rows := rowsOf[schemas.Rollout](640)
	good := encodeGroups(t, rows, 80) // 8 groups
	one := corruptGroup(t, good, 5)
	two := corruptGroup(t, corruptGroup(t, good, 6), 2)
	for _, workers := range []int{1, 2, 4, 8} {
		_, _, err := table.DecodeWorkers(schemas.Rollouts, "bad.parquet", one, workers)
		require.ErrorIs(t, err, table.ErrCorrupt)
		require.Contains(t, err.Error(), "bad.parquet: row group 5: ")
		var first string
		for rep := range 20 {
			_, _, err := table.DecodeWorkers(schemas.Rollouts, "bad.parquet", two, workers)
			require.ErrorIs(t, err, table.ErrCorrupt)
			require.True(t, strings.HasPrefix(err.Error(), "bad.parquet: row group 2: "), "workers %d: %v", workers, err)
			if rep == 0 {
				first = err.Error()
			}
			require.Equal(t, first, err.Error(), "the error must not depend on scheduling")
		}
	}
}

// TestDecodeFooterRowCountMismatch: a footer whose num_rows disagrees with
// its row groups is corrupt.
func TestDecodeFooterRowCountMismatch(t *testing.T) {
	data := encodeGroups(t, rowsOf[schemas.Metric](100), 30)
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.EqualValues(t, 100, f.NumRows())
	// Replace the footer (thrift FileMetaData, its length, "PAR1") with
	// one that says 101 rows.
	md := *f.Metadata()
	md.NumRows = 101
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
	require.NoError(t, err)
	metaLen := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	body := data[:len(data)-8-metaLen]
	patched := append(bytes.Clone(body), footer...)
	patched = binary.LittleEndian.AppendUint32(patched, uint32(len(footer)))
	patched = append(patched, "PAR1"...)
	_, _, err = table.Decode(schemas.Metrics, "m.parquet", patched)
	require.ErrorIs(t, err, table.ErrCorrupt)
	require.ErrorContains(t, err, "m.parquet: ")
	require.ErrorContains(t, err, "footer says 101")
}

// BenchmarkDecode decodes one rollouts part of 100,000 rows (13 row groups,
// about 150 MB of file; the file of internal/bench's BenchmarkParquet) on
// one goroutine (workers=1) and on GOMAXPROCS goroutines (Decode). MB/s is
// the logical row bytes (bench.RolloutBytes) per second; MB/CPU-s the same
// bytes per second of the process's user+system CPU time (GC included).
func BenchmarkDecode(b *testing.B) {
	words, err := bench.EmbeddedWords()
	require.NoError(b, err)
	rows := words.Rollouts(100_000, 1, bench.DefaultRolloutShape)
	logical := bench.RolloutBytes(rows)
	data, err := table.Encode(schemas.Rollouts, rows)
	require.NoError(b, err)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(logical)
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				got, _, err := table.DecodeWorkers(schemas.Rollouts, "bench.parquet", data, workers)
				if err != nil || len(got) != len(rows) {
					b.Fatalf("decoded %d rows: %v", len(got), err)
				}
			}
			cpu := cpuTime(b) - cpu0
			b.ReportMetric(float64(logical)*float64(b.N)/1e6/cpu.Seconds(), "MB/CPU-s")
		})
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
