package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	jsonOut = flag.String("bench.json", "", "write the benchmark report as JSON to this file")
	mdOut   = flag.String("bench.md", "", "write the benchmark report as Markdown tables to this file")
	spade   = flag.String("bench.spade", "", "spade binary for the round benchmarks (default: go build ./cmd/spade into a temp dir)")
)

// rec collects every benchmark's results; meter counts CPU of this process
// and everything it starts (set only when benchmarks run).
var (
	rec   Recorder
	meter *CPUMeter
)

// full reports whether BENCH_FULL=1 asks for the long benchmarks (the
// 2,400-environment round).
func full() bool { return os.Getenv("BENCH_FULL") == "1" }

// repoRoot is the module root, two levels up from this package.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	abs, err := filepath.Abs("../..")
	if err != nil {
		tb.Fatal(err)
	}
	return abs
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleModelServer:
		os.Exit(serveModel())
	case roleRoundServer:
		os.Exit(serveRound())
	}
	flag.Parse()
	benchmarking := flag.Lookup("test.bench").Value.String() != ""
	if benchmarking {
		meter = NewCPUMeter("spade-bench")
	}
	before, _ := ReadLoadAvg()
	code := m.Run()
	if meter != nil {
		if err := meter.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if benchmarking && code == 0 {
		after, _ := ReadLoadAvg()
		rep := &Report{Machine: ReadMachine(), CPUSource: meter.Source(), LoadBefore: before, LoadAfter: after,
			Command: "go test ./internal/bench " + strings.Join(os.Args[1:], " "), Results: rec.Results()}
		if err := writeReport(rep); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func writeReport(rep *Report) error {
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			return err
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if *mdOut != "" {
		f, err := os.Create(*mdOut)
		if err != nil {
			return err
		}
		if err := rep.WriteMarkdown(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

// cpu returns the meter's total, failing tb on a read error.
func cpu(tb testing.TB) time.Duration {
	tb.Helper()
	if meter == nil {
		tb.Fatal("CPU meter not set: run with -bench")
	}
	d, err := meter.Total()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// measure runs f and returns its wall-clock and CPU time (this process and
// its descendants, see CPUMeter).
func measure(tb testing.TB, f func()) (wall, cpuTime time.Duration) {
	tb.Helper()
	c0 := cpu(tb)
	start := time.Now()
	f()
	wall = time.Since(start)
	return wall, cpu(tb) - c0
}

// execCommand is exec.Command with the test's name in failures.
func execCommand(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(name, args...)
}
