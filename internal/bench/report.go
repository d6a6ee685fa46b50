package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Median returns the median of xs (the mean of the two middle values for
// an even count), NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Target is a pass/fail threshold of one measure, e.g. {">=", 20000} for
// ">= 20,000 steps/s". The zero Target means "no target".
type Target struct {
	// Op is ">=" or "<=" ("" for none).
	Op string `json:"op,omitempty"`
	// Value is the threshold, in the Unit of the Result it belongs to.
	Value float64 `json:"value,omitempty"`
}

// AtLeast and AtMost build Targets.
func AtLeast(v float64) Target { return Target{Op: ">=", Value: v} }

// AtMost builds a "<= v" Target.
func AtMost(v float64) Target { return Target{Op: "<=", Value: v} }

// Met reports whether v meets the target; ok is false when there is none.
func (t Target) Met(v float64) (met, ok bool) {
	switch t.Op {
	case ">=":
		return v >= t.Value, true
	case "<=":
		return v <= t.Value, true
	}
	return false, false
}

// String formats the target as "≥ 20,000" style text ("" for none).
func (t Target) String() string {
	if t.Op == "" {
		return ""
	}
	return t.Op + " " + FormatNumber(t.Value)
}

// Result is one measure of one benchmark: the median over its repetitions
// (each in Samples), the load average when it was taken, and its target.
type Result struct {
	// Section groups results as docs/benchmarks.md does ("sandbox",
	// "parquet", "orchestration", "round", "corpus", "grpo").
	Section string `json:"section"`
	// Name says what was measured, including the configuration.
	Name string `json:"name"`
	// Value is the median of Samples.
	Value float64 `json:"value"`
	// Unit of Value and Samples, e.g. "steps/s", "MB/s", "s", "%", "x".
	Unit string `json:"unit"`
	// Samples holds one measurement per repetition, in Unit, in the order
	// taken.
	Samples []float64 `json:"samples"`
	// Target is the pass/fail threshold of Value (zero: none).
	Target Target `json:"target"`
	// Load1 is the 1-minute load average right after the measure.
	Load1 float64 `json:"load1"`
	// Note qualifies the figure (what limits it, what it excludes).
	Note string `json:"note,omitempty"`
}

// Report is one benchmark run: where it ran, how CPU was counted, and
// every result in the order taken.
type Report struct {
	// Machine describes where the benchmarks ran.
	Machine Machine `json:"machine"`
	// CPUSource is the CPUMeter source behind every CPU figure.
	CPUSource string `json:"cpu_source"`
	// Command is the command line that produced the report.
	Command string `json:"command"`
	// LoadBefore and LoadAfter bracket the whole run.
	LoadBefore LoadAvg `json:"load_before"`
	// LoadAfter is the load average read after the last benchmark.
	LoadAfter LoadAvg `json:"load_after"`
	// Results holds every result, in the order taken.
	Results []Result `json:"results"`
}

// Recorder collects Results from benchmarks; it is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	results []Result
}

// Add records a result whose Value is the median of samples, stamped with
// the current 1-minute load average (0 when /proc/loadavg is unreadable).
func (r *Recorder) Add(section, name, unit string, samples []float64, target Target, note string) Result {
	load, _ := ReadLoadAvg()
	res := Result{Section: section, Name: name, Value: Median(samples), Unit: unit, Samples: slices.Clone(samples), Target: target, Load1: load[0], Note: note}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, res)
	return res
}

// Results returns a copy of the results recorded so far, in order.
func (r *Recorder) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.results)
}

// WriteJSON writes the report as indented JSON. Every number that JSON
// cannot hold (a NaN Value, from a result with no samples, or a NaN or
// infinite sample or target) is written as null, so one broken measure
// neither fails the report nor reads as a real 0. It returns the
// encoder's error (w's write error) wrapped as "write benchmark report",
// else nil.
func (rep *Report) WriteJSON(w io.Writer) error {
	type jsonTarget struct {
		Op    string   `json:"op,omitempty"`
		Value *float64 `json:"value,omitempty"`
	}
	type jsonResult struct {
		Section string     `json:"section"`
		Name    string     `json:"name"`
		Value   *float64   `json:"value"`
		Unit    string     `json:"unit"`
		Samples []*float64 `json:"samples"`
		Target  jsonTarget `json:"target"`
		Load1   *float64   `json:"load1"`
		Note    string     `json:"note,omitempty"`
	}
	finite := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	out := struct {
		Machine    Machine      `json:"machine"`
		CPUSource  string       `json:"cpu_source"`
		Command    string       `json:"command"`
		LoadBefore LoadAvg      `json:"load_before"`
		LoadAfter  LoadAvg      `json:"load_after"`
		Results    []jsonResult `json:"results"`
	}{rep.Machine, rep.CPUSource, rep.Command, rep.LoadBefore, rep.LoadAfter, []jsonResult{}}
	for _, r := range rep.Results {
		jr := jsonResult{Section: r.Section, Name: r.Name, Value: finite(r.Value), Unit: r.Unit,
			Samples: make([]*float64, len(r.Samples)), Target: jsonTarget{Op: r.Target.Op}, Load1: finite(r.Load1), Note: r.Note}
		if r.Target.Value != 0 {
			jr.Target.Value = finite(r.Target.Value)
		}
		for i, v := range r.Samples {
			jr.Samples[i] = finite(v)
		}
		out.Results = append(out.Results, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write benchmark report: %w", err)
	}
	return nil
}

// WriteMarkdown writes the report as the tables docs/benchmarks.md quotes:
// a machine line, then per section a table of measure, median, unit,
// samples, target, whether it is met, and the load average. The text is
// built in memory and written to w in one call; the only error is that
// write's, returned unwrapped.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %.1f GiB RAM, Linux %s, %s %s/%s. CPU time from %s. Load average %s before, %s after.\n\n",
		m.NumCPU, orUnknown(m.CPUModel), float64(m.MemTotalBytes)/(1<<30), orUnknown(m.Kernel), m.GoVersion, m.GOOS, m.GOARCH,
		rep.CPUSource, rep.LoadBefore, rep.LoadAfter)
	if rep.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", rep.Command)
	}
	section := ""
	for _, r := range rep.Results {
		if r.Section != section {
			section = r.Section
			fmt.Fprintf(&b, "\n### %s\n\n| measure | median | unit | samples | target | met | load1 | note |\n|---|---:|---|---|---|---|---:|---|\n", section)
		}
		met := ""
		if ok, has := r.Target.Met(r.Value); has {
			met = "no"
			if ok {
				met = "yes"
			}
		}
		samples := make([]string, len(r.Samples))
		for i, s := range r.Samples {
			samples[i] = FormatNumber(s)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.1f | %s |\n", r.Name, FormatNumber(r.Value), r.Unit,
			strings.Join(samples, ", "), r.Target, met, r.Load1, strings.ReplaceAll(r.Note, "|", "/"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// FormatNumber prints v with thousands separators and a precision that
// suits its size: 3 significant decimals below 10, 1 below 1,000, none
// above ("0.0421", "11.3", "47,200").
func FormatNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case v < 0:
		return "-" + FormatNumber(-v)
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', max(0, 2-int(math.Floor(math.Log10(v)))), 64)
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
