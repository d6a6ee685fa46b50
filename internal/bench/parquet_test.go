package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" driver

	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

const (
	parquetRows = 100_000
	parquetReps = 5
)

// parquetRoundTrip encodes a copy of gen (unsorted each time) with
// table.Encode into the file ours and decodes it back, returning the
// write's and the read's wall-clock and CPU time and the file's size;
// BenchmarkParquet's spade side, split out of it.
func parquetRoundTrip(b *testing.B, gen []schemas.Rollout, ours string) (wWall, wC, rWall, rC time.Duration, size int64) {
	rows := slices.Clone(gen) // Encode sorts in place; start unsorted each time
	runtime.GC()              // no repetition pays for the previous one's garbage
	wWall, wC = measure(b, func() {
		data, err := table.Encode(schemas.Rollouts, rows)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(ours, data, 0o644); err != nil {
			b.Fatal(err)
		}
		size = int64(len(data))
	})
	var got []schemas.Rollout
	runtime.GC()
	rWall, rC = measure(b, func() {
		data, err := os.ReadFile(ours)
		if err != nil {
			b.Fatal(err)
		}
		if got, _, err = table.Decode(schemas.Rollouts, ours, data); err != nil {
			b.Fatal(err)
		}
	})
	if len(got) != parquetRows {
		b.Fatalf("decoded %d rows, want %d", len(got), parquetRows)
	}
	return wWall, wC, rWall, rC, size
}

// ratios is a[i] / c[i] for each i; split out of BenchmarkParquet.
func ratios(a, c []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / c[i]
	}
	return out
}

// perCPUSecond is logical bytes, in MB, per each CPU-second of cpuSec;
// split out of BenchmarkParquet.
func perCPUSecond(logical float64, cpuSec []float64) []float64 {
	out := make([]float64, len(cpuSec))
	for i, s := range cpuSec {
		out[i] = logical / 1e6 / s
	}
	return out
}

// BenchmarkParquet writes and reads a realistic rollouts table (100,000
// schemas.Rollout rows, DefaultRolloutShape) with the project's writer
// (table.Encode, then the file written to disk) and reader (table.Decode of
// every column into rows), and, in the same run on the same rows, with
// DuckDB: COPY of an in-memory table to a zstd Parquet file (the table is
// loaded first, untimed), and a read of every column of the same file into
// a DuckDB table. MB/s is logical row bytes (RolloutBytes) per second for
// both, so the ratio is a throughput ratio. DuckDB runs with its default
// threads (all cores) and, for a per-core comparison, with one thread.
// Targets: write and read >= 1.0x DuckDB.
func BenchmarkParquet(b *testing.B) {
	words, err := EmbeddedWords()
	if err != nil {
		b.Fatal(err)
	}
	gen := words.Rollouts(parquetRows, 1, DefaultRolloutShape)
	logical := float64(RolloutBytes(gen))
	dir := b.TempDir()
	ours := filepath.Join(dir, "ours.parquet")
	duckPath := filepath.Join(dir, "duck.parquet")
	ctx := context.Background()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	// One connection: SET threads and the temp table must stay on it.
	db.SetMaxOpenConns(1)
	exec := func(q string) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatalf("duckdb %q: %v", q, err)
		}
	}
	mbps := func(d time.Duration) float64 { return logical / 1e6 / d.Seconds() }
	cores := runtime.NumCPU()
	for range b.N {
		var (
			w, wCPU, r, rCPU         []float64
			dw, dwCPU, dr, drCPU     []float64
			dw1, dw1CPU, dr1, dr1CPU []float64
			size, dsize              int64
		)
		// spade writes then reads the file; returns wall-clock seconds and CPU.
		spade := func() (wWall time.Duration, wC time.Duration, rWall time.Duration, rC time.Duration) {
			wWall, wC, rWall, rC, size = parquetRoundTrip(b, gen, ours)
			return wWall, wC, rWall, rC
		}
		// duck writes (COPY) and reads back spade's file with threads threads.
		duck := func(threads int) (wWall time.Duration, wC time.Duration, rWall time.Duration, rC time.Duration) {
			exec(fmt.Sprintf("SET threads = %d", threads))
			_ = os.Remove(duckPath)
			runtime.GC() // as for spade: the Go heap is clean for both
			wWall, wC = measure(b, func() {
				exec(fmt.Sprintf("COPY rollouts TO '%s' (FORMAT parquet, COMPRESSION zstd)", duckPath))
			})
			rWall, rC = measure(b, func() {
				exec(fmt.Sprintf("CREATE OR REPLACE TEMP TABLE readback AS SELECT * FROM read_parquet('%s')", ours))
			})
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM readback").Scan(&n); err != nil || n != parquetRows {
				b.Fatalf("duckdb read back %d rows (%v), want %d", n, err, parquetRows)
			}
			st, err := os.Stat(duckPath)
			if err != nil {
				b.Fatal(err)
			}
			dsize = st.Size()
			return wWall, wC, rWall, rC
		}
		// One untimed warm-up of each side (heap growth, page cache, DuckDB's
		// first query), then repetitions in which spade, DuckDB with all
		// threads and DuckDB with one thread run back to back, so each
		// repetition's ratio compares runs under the same load.
		spade()
		exec(fmt.Sprintf("CREATE OR REPLACE TABLE rollouts AS SELECT * FROM read_parquet('%s')", ours))
		duck(cores)
		for range parquetReps {
			ww, wc, rw, rc := spade()
			w, wCPU, r, rCPU = append(w, mbps(ww)), append(wCPU, wc.Seconds()), append(r, mbps(rw)), append(rCPU, rc.Seconds())
			ww, wc, rw, rc = duck(cores)
			dw, dwCPU, dr, drCPU = append(dw, mbps(ww)), append(dwCPU, wc.Seconds()), append(dr, mbps(rw)), append(drCPU, rc.Seconds())
			ww, wc, rw, rc = duck(1)
			dw1, dw1CPU, dr1, dr1CPU = append(dw1, mbps(ww)), append(dw1CPU, wc.Seconds()), append(dr1, mbps(rw)), append(dr1CPU, rc.Seconds())
		}

		div := ratios
		perCPU := func(cpuSec []float64) []float64 { return perCPUSecond(logical, cpuSec) }
		const s = "2. Parquet I/O"
		shape := fmt.Sprintf("%d rollouts rows, %.0f MB logical", parquetRows, logical/1e6)
		rec.Add(s, "write, spade table.Encode + file write: "+shape, "MB/s", w, Target{}, fmt.Sprintf("%s rows/s at the median; file %.1f MB; single goroutine, zstd level 3, 8,192-row groups, rows sorted first; after one untimed warm-up, spade and DuckDB alternate within each repetition", FormatNumber(Median(w)*1e6/logical*parquetRows), float64(size)/1e6))
		rec.Add(s, fmt.Sprintf("write, DuckDB COPY TO parquet zstd, %d threads", cores), "MB/s", dw, Target{}, fmt.Sprintf("%s rows/s at the median; file %.1f MB; 122,880-row groups", FormatNumber(Median(dw)*1e6/logical*parquetRows), float64(dsize)/1e6))
		rec.Add(s, "write, DuckDB COPY, 1 thread", "MB/s", dw1, Target{}, "")
		rec.Add(s, fmt.Sprintf("write ratio spade / DuckDB (%d threads), same repetition", cores), "x", div(w, dw), AtLeast(1), "")
		rec.Add(s, "write ratio spade / DuckDB (1 thread)", "x", div(w, dw1), AtLeast(1), "per-core comparison")
		rec.Add(s, "write per CPU-second: spade", "MB/CPU-s", perCPU(wCPU), Target{}, "")
		rec.Add(s, "write per CPU-second: DuckDB (all threads)", "MB/CPU-s", perCPU(dwCPU), Target{}, "")
		rec.Add(s, "write per CPU-second: DuckDB (1 thread)", "MB/CPU-s", perCPU(dw1CPU), Target{}, "")
		rec.Add(s, "read all columns, spade file read + table.Decode into rows", "MB/s", r, Target{}, fmt.Sprintf("%s rows/s at the median; row groups decoded by GOMAXPROCS goroutines", FormatNumber(Median(r)*1e6/logical*parquetRows)))
		rec.Add(s, fmt.Sprintf("read all columns of the same file, DuckDB CREATE TABLE AS read_parquet, %d threads", cores), "MB/s", dr, Target{}, fmt.Sprintf("%s rows/s at the median", FormatNumber(Median(dr)*1e6/logical*parquetRows)))
		rec.Add(s, "read, DuckDB, 1 thread", "MB/s", dr1, Target{}, "")
		rec.Add(s, fmt.Sprintf("read ratio spade / DuckDB (%d threads)", cores), "x", div(r, dr), AtLeast(1), "")
		rec.Add(s, "read ratio spade / DuckDB (1 thread)", "x", div(r, dr1), AtLeast(1), "per-core comparison")
		rec.Add(s, "read per CPU-second: spade", "MB/CPU-s", perCPU(rCPU), Target{}, "")
		rec.Add(s, "read per CPU-second: DuckDB (all threads)", "MB/CPU-s", perCPU(drCPU), Target{}, "")
		rec.Add(s, "read per CPU-second: DuckDB (1 thread)", "MB/CPU-s", perCPU(dr1CPU), Target{}, "")
	}
}
