package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"one", []float64{3}, 3},
		{"odd", []float64{5, 1, 3}, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"duplicates", []float64{2, 2, 9}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.in...)
			if got := Median(in); got != tc.want {
				t.Fatalf("Median(%v) = %v, want %v", tc.in, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("Median modified its input: %v", in)
				}
			}
		})
	}
	if !math.IsNaN(Median(nil)) {
		t.Fatal("Median(nil) is not NaN")
	}
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		t        Target
		v        float64
		met, has bool
		text     string
	}{
		{AtLeast(20000), 20000, true, true, ">= 20,000"},
		{AtLeast(20000), 19999, false, true, ">= 20,000"},
		{AtMost(10), 9.5, true, true, "<= 10.0"},
		{AtMost(10), 10.5, false, true, "<= 10.0"},
		{Target{}, 1, false, false, ""},
	} {
		t.Run(tc.text+"/"+FormatNumber(tc.v), func(t *testing.T) {
			met, has := tc.t.Met(tc.v)
			if met != tc.met || has != tc.has {
				t.Fatalf("Met(%v) = %v, %v; want %v, %v", tc.v, met, has, tc.met, tc.has)
			}
			if got := tc.t.String(); got != tc.text {
				t.Fatalf("String() = %q, want %q", got, tc.text)
			}
		})
	}
}

func TestFormatNumber(t *testing.T) {
	for in, want := range map[float64]string{
		0: "0", 0.0421: "0.0421", 1.5: "1.50", 9.87: "9.87", 11.27: "11.3", 999.94: "999.9",
		1000: "1,000", 47200.4: "47,200", 1234567: "1,234,567", -2500: "-2,500", math.NaN(): "n/a",
	} {
		if got := FormatNumber(in); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestParseLoadAvg(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     LoadAvg
		bad      bool
	}{
		{"proc", "0.52 0.58 0.59 1/467 12345\n", LoadAvg{0.52, 0.58, 0.59}, false},
		{"short", "0.52 0.58", LoadAvg{}, true},
		{"word", "x 0.58 0.59", LoadAvg{}, true},
		{"negative", "1 -2 3", LoadAvg{}, true},
		{"nan", "NaN 1 2", LoadAvg{}, true},
		{"inf", "1 +Inf 2", LoadAvg{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLoadAvg(tc.in)
			if (err != nil) != tc.bad || got != tc.want {
				t.Fatalf("ParseLoadAvg(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
	if _, err := os.Stat("/proc/loadavg"); err == nil {
		if _, err := ReadLoadAvg(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMachineParsers(t *testing.T) {
	if got := cpuModel([]byte("processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t: x\n")); got != "AMD EPYC 9B14" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := memTotal([]byte("MemTotal:       24576000 kB\nMemFree: 1 kB\n")); got != 24576000<<10 {
		t.Errorf("memTotal = %d", got)
	}
	if got, err := parseVMHWM([]byte("Name:\tspade\nVmPeak:\t 9 kB\nVmHWM:\t  167520 kB\n")); err != nil || got != 167520<<10 {
		t.Errorf("parseVMHWM = %d, %v", got, err)
	}
	if _, err := parseVMHWM([]byte("Name:\tzombie\n")); err == nil {
		t.Error("parseVMHWM accepted a status without VmHWM")
	}
	if m := ReadMachine(); m.NumCPU < 1 || m.GoVersion == "" {
		t.Errorf("ReadMachine = %+v", m)
	}
}

func TestCgroupParsers(t *testing.T) {
	self := []byte("12:cpu,cpuacct:/user.slice\n4:memory:/x\n0::/user.slice/session-1.scope\n")
	for _, tc := range []struct{ controller, want string }{{"", "/user.slice/session-1.scope"}, {"cpuacct", "/user.slice"}, {"memory", "/x"}} {
		got, err := parseSelfCgroup(self, tc.controller)
		if err != nil || got != tc.want {
			t.Errorf("parseSelfCgroup(%q) = %q, %v; want %q", tc.controller, got, err, tc.want)
		}
	}
	if _, err := parseSelfCgroup(self, "pids"); err == nil {
		t.Error("parseSelfCgroup found a missing controller")
	}
	mi := []byte("30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"32 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n" +
		"40 30 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
	if got, err := parseCgroupMount(mi, "cgroup", "cpuacct"); err != nil || got != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("v1 mount = %q, %v", got, err)
	}
	if got, err := parseCgroupMount(mi, "cgroup2", ""); err != nil || got != "/sys/fs/cgroup/unified" {
		t.Errorf("v2 mount = %q, %v", got, err)
	}
	if _, err := parseCgroupMount(mi, "cgroup", "blkio"); err == nil {
		t.Error("found a missing v1 controller")
	}
}

// TestCPUMeterCountsChildren checks the meter sees CPU burnt by a child
// process that is killed, never reaped by its own parent: the case
// getrusage misses. Without a usable cgroup the meter must say so.
func TestCPUMeterCountsChildren(t *testing.T) {
	m := NewCPUMeter("spade-bench-test")
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}()
	if m.Source() == SourceRusage {
		t.Skip("no writable cgroup here; the meter falls back to getrusage (Source says so)")
	}
	c0, err := m.Total()
	if err != nil {
		t.Fatal(err)
	}
	// sh starts a grandchild that does a fixed amount of work (about 0.3
	// CPU-s), then kills it with SIGKILL and exits without waiting for it,
	// so its CPU never reaches anyone's RUSAGE_CHILDREN.
	dir := t.TempDir()
	busy := execCommand(t, "/bin/sh", "-c", `(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; touch "$1/done"; sleep 100) &
while [ ! -e "$1/done" ]; do sleep 0.05; done; kill -9 $!`, "sh", dir)
	if err := busy.Run(); err != nil {
		t.Fatal(err)
	}
	c1, err := m.Total()
	if err != nil {
		t.Fatal(err)
	}
	if d := c1 - c0; d < 150*time.Millisecond {
		t.Fatalf("meter saw %v of CPU for about 300 ms of a killed grandchild's work", d)
	}
}

func TestParseStageLog(t *testing.T) {
	log := `time=2026-11-30T01:56:01.112Z level=INFO msg="stage start" round=0 stage=corpus parts=1 todo=1 shard=0/1
time=2026-11-30T01:56:01.216Z level=INFO msg="stage committed" round=0 stage=corpus seconds=0.105297476
garbage line without pairs
time=2026-11-30T01:56:06.474Z level=INFO msg="stage committed" round=1 stage=design seconds=5.18013369
time=x level=WARN msg="sandbox \"isolation\" weak" detail="a b"
`
	got, err := ParseStageLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []StageTime{{0, "corpus", 0.105297476}, {1, "design", 5.18013369}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, tc := range []struct{ name, line, field string }{
		{"no stage", `msg="stage committed" round=1 seconds=1`, "stage"},
		{"bad round", `msg="stage committed" round=x stage=a seconds=1`, "round"},
		{"bad seconds", `msg="stage committed" round=1 stage=a seconds=-1`, "seconds"},
		{"nan seconds", `msg="stage committed" round=1 stage=a seconds=NaN`, "seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseStageLog(strings.NewReader("ok=1\n" + tc.line + "\n"))
			if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v does not name line 2 and field %s", err, tc.field)
			}
		})
	}
}

func FuzzParseStageLog(f *testing.F) {
	f.Add(`time=t level=INFO msg="stage committed" round=1 stage=design seconds=5.18`)
	f.Add(`msg="stage committed" round=1 stage="a b" seconds=1e3`)
	f.Add(`msg="unterminated`)
	f.Add("k=v\nmsg=\"stage committed\" round=99999999999999999999 stage=x seconds=1")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseStageLog(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, st := range got {
			if st.Stage == "" || st.Seconds < 0 || math.IsNaN(st.Seconds) {
				t.Fatalf("accepted a bad stage line: %+v", st)
			}
		}
	})
}

func FuzzParseLoadAvg(f *testing.F) {
	f.Add("0.52 0.58 0.59 1/467 12345\n")
	f.Add("NaN 1 2")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLoadAvg(s)
		if err != nil {
			return
		}
		for _, v := range l {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("ParseLoadAvg(%q) accepted %v", s, l)
			}
		}
	})
}

// TestGenerators checks the generators are deterministic, realistic in
// size, and that their rows round-trip through the project's writer.
func TestGenerators(t *testing.T) {
	w, err := EmbeddedWords()
	if err != nil {
		t.Fatal(err)
	}
	a := w.Rollouts(64, 3, DefaultRolloutShape)
	b := w.Rollouts(64, 3, DefaultRolloutShape)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatal("Rollouts is not deterministic")
	}
	for _, r := range a {
		if n := len(r.Messages); n < 4 || n > 2+2*DefaultRolloutShape.MaxTurns || int64(len(r.Actions)) != r.Turns {
			t.Fatalf("row %+v: %d messages, %d actions, %d turns", r.EnvID, n, len(r.Actions), r.Turns)
		}
	}
	if per := RolloutBytes(a) / int64(len(a)); per < 1500 || per > 8000 {
		t.Fatalf("%d logical bytes per rollout; want a realistic 1.5-8 KB", per)
	}
	data, err := table.Encode(schemas.Rollouts, a)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := table.Decode(schemas.Rollouts, "gen", data)
	if err != nil || len(back) != len(a) {
		t.Fatalf("decode: %d rows, %v", len(back), err)
	}

	docs := w.CorpusDocs(10, 50, 7)
	again := w.CorpusDocs(30, 5, 7)
	for i := range again {
		if again[i] != docs[20+i] {
			t.Fatalf("CorpusDocs is not per-document deterministic at %d", 30+i)
		}
	}
	for _, d := range docs {
		if len(d.Text) < 1000 || len(d.Text) > 2100 || d.SHA256 == "" || d.Domain == "" {
			t.Fatalf("doc %s: %d bytes of text, domain %q", d.DocID, len(d.Text), d.Domain)
		}
	}
	if docs[0].DocID != "gen-0000010" {
		t.Fatalf("first doc id %q", docs[0].DocID)
	}
}

// TestReportGolden pins the Markdown and JSON layout of a report.
func TestReportGolden(t *testing.T) {
	var r Recorder
	r.Add("1. sandbox", "step()", "steps/s", []float64{11273, 9000, 12000}, AtLeast(20000), "a | b")
	r.Add("1. sandbox", "ratio", "x", []float64{2260}, AtLeast(100), "")
	r.Add("4. round scaling", "wall", "s", []float64{36.5}, AtMost(10), "")
	res := r.Results()
	for i := range res {
		res[i].Load1 = 4.5 // the live load average is not reproducible
	}
	rep := &Report{
		Machine:   Machine{NumCPU: 2, CPUModel: "AMD EPYC", MemTotalBytes: 24 << 30, Kernel: "6.1", GoVersion: "go1.26", GOOS: "linux", GOARCH: "amd64"},
		CPUSource: SourceCgroup2, Command: "make bench", LoadBefore: LoadAvg{1, 2, 3}, LoadAfter: LoadAvg{4, 5, 6}, Results: res,
	}
	var md, js bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{"report.md": md.Bytes(), "report.json": js.Bytes()} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from golden:\n%s", name, got)
		}
	}
}

// TestWriteJSONNonFinite: a NaN or infinite value, sample or target is
// written as null (the encoder refuses them), never as a made-up number.
func TestWriteJSONNonFinite(t *testing.T) {
	rep := Report{Results: []Result{
		{Section: "s", Name: "none", Value: Median(nil), Unit: "x", Samples: []float64{}},
		{Section: "s", Name: "broken", Value: math.Inf(1), Unit: "x", Samples: []float64{1, math.NaN(), math.Inf(-1)}, Target: AtLeast(math.Inf(1))},
	}}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Results []struct {
			Value   *float64   `json:"value"`
			Samples []*float64 `json:"samples"`
			Target  struct {
				Op    string   `json:"op"`
				Value *float64 `json:"value"`
			} `json:"target"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.Bytes())
	}
	r0, r1 := got.Results[0], got.Results[1]
	if r0.Value != nil || r1.Value != nil {
		t.Errorf("non-finite values written as numbers:\n%s", b.Bytes())
	}
	if len(r1.Samples) != 3 || r1.Samples[0] == nil || *r1.Samples[0] != 1 || r1.Samples[1] != nil || r1.Samples[2] != nil {
		t.Errorf("samples not [1, null, null]:\n%s", b.Bytes())
	}
	if r1.Target.Op != ">=" || r1.Target.Value != nil {
		t.Errorf("infinite target not null:\n%s", b.Bytes())
	}
}
