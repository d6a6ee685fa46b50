package bench

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// TestAnalyzePlays checks the in-flight and bound arithmetic on a
// hand-made trace: two plays at P = 2, one of two calls (0-1 s, 1-2 s)
// and one of one call (0-1 s).
func TestAnalyzePlays(t *testing.T) {
	s := int64(time.Second)
	st := analyzePlays([]traceRec{{0, s, "agent", 1}, {s, 2 * s, "agent", 1}, {0, s, "agent", 2}}, 2)
	if st.Plays != 2 || st.Calls != 3 || st.LongestPlay != 2 {
		t.Fatalf("plays %d calls %d longest %d", st.Plays, st.Calls, st.LongestPlay)
	}
	// 3 s of calls over 2 s; 2 plays remain until the first ends at 1 s,
	// with 2 calls in flight all along.
	if st.MeanInFlight != 1.5 || st.Window != 2 || st.WindowSeconds != 1 {
		t.Fatalf("mean %v window %v over %v s", st.MeanInFlight, st.Window, st.WindowSeconds)
	}
	if st.Chain != 2 || st.Work != 1.5 || st.Bound != 2 {
		t.Fatalf("chain %v work %v bound %v", st.Chain, st.Work, st.Bound)
	}
	if st := analyzePlays([]traceRec{{0, s, "agent", 1}}, 2); st.Window != -1 {
		t.Fatalf("fewer plays than P: window %v, want -1", st.Window)
	}
}

// TestLatencyDraw checks the log-normal draw's median and p99 over evenly
// spread uniforms, and that a fixed spec always gives its latency.
func TestLatencyDraw(t *testing.T) {
	spec, err := parseLatencySpec("lognormal:2000:10000")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	ds := make([]float64, n)
	for i := range ds {
		ds[i] = spec.draw(uint64((float64(i) + 0.5) / n * (1 << 63) * 2)).Seconds()
	}
	sort.Float64s(ds)
	if med, p99 := ds[n/2], ds[n*99/100]; math.Abs(med-2) > 0.02 || math.Abs(p99-10) > 0.2 {
		t.Fatalf("median %.3f s, p99 %.3f s; want 2 and 10", med, p99)
	}
	fixed, err := parseLatencySpec("fixed:300")
	if err != nil || fixed.draw(12345) != 300*time.Millisecond || fixed.String() != "fixed:300" {
		t.Fatalf("fixed: %v %v %v", fixed, fixed.draw(12345), err)
	}
	for _, bad := range []string{"", "fixed", "fixed:x", "lognormal:10:5", "uniform:1:2"} {
		if _, err := parseLatencySpec(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestWriteTrace: one line per call (arrival, answer, seed), in a file
// named after the case with its spaces and punctuation folded to '_'.
func TestWriteTrace(t *testing.T) {
	dir := t.TempDir()
	writeTrace(t, dir, "baseline 375bab7-c128-log-normal 2s median, p99 10s", []traceRec{{Arrive: 1, Depart: 5, Seed: 7}, {Arrive: 2, Depart: 9, Seed: 8}})
	b, err := os.ReadFile(filepath.Join(dir, "baseline_375bab7-c128-log-normal_2s_median_p99_10s.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "1 5 7\n2 9 8\n"; got != want {
		t.Fatalf("trace %q, want %q", got, want)
	}
}
