package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// The round benchmark's model server: modeltest's default handler playing
// every SPADE role (one environment per designer prompt, so each slot has
// its own env_id), answering each request after a latency drawn from a
// fixed or a long-tailed distribution, and tracing every chat request.
const (
	roleRoundServer = "roundserver"
	// latencySpecEnv is "fixed:MS" or "lognormal:MEDIAN_MS:P99_MS".
	latencySpecEnv = "SPADE_BENCH_LATENCY"
)

// latencySpec is a latency distribution for the round server.
type latencySpec struct {
	// Median is the median latency; P99 the 99th percentile (== Median
	// for a fixed latency).
	Median, P99 time.Duration
}

func (l latencySpec) String() string {
	if l.P99 <= l.Median {
		return fmt.Sprintf("fixed:%d", l.Median.Milliseconds())
	}
	return fmt.Sprintf("lognormal:%d:%d", l.Median.Milliseconds(), l.P99.Milliseconds())
}

func parseLatencySpec(s string) (latencySpec, error) {
	f := strings.Split(s, ":")
	ms := func(v string) (time.Duration, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s=%q: %q is not a number of milliseconds", latencySpecEnv, s, v)
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	switch {
	case len(f) == 2 && f[0] == "fixed":
		d, err := ms(f[1])
		return latencySpec{d, d}, err
	case len(f) == 3 && f[0] == "lognormal":
		m, err := ms(f[1])
		if err != nil {
			return latencySpec{}, err
		}
		p, err := ms(f[2])
		if err == nil && p <= m {
			err = fmt.Errorf("%s=%q: the p99 must exceed the median", latencySpecEnv, s)
		}
		return latencySpec{m, p}, err
	}
	return latencySpec{}, fmt.Errorf("%s=%q: want fixed:MS or lognormal:MEDIAN_MS:P99_MS", latencySpecEnv, s)
}

// draw is the latency of the request whose content hashes to h: u =
// h / 2^64 is a uniform draw, so the same request waits the same time in
// every run (the old and the new code see the same latencies), and the
// log-normal quantile is exp(mu + sigma z(u)) with mu = ln(median) and
// sigma = ln(p99 / median) / z(0.99).
func (l latencySpec) draw(h uint64) time.Duration {
	if l.P99 <= l.Median {
		return l.Median
	}
	u := (float64(h>>11) + 0.5) / (1 << 53)
	sigma := math.Log(float64(l.P99)/float64(l.Median)) / 2.3263478740408408
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	return time.Duration(float64(l.Median) * math.Exp(sigma*z))
}

// traceRec is one chat request as the round server saw it.
type traceRec struct {
	// Arrive and Depart are Unix nanoseconds: when the handler ran and when
	// the answer was due (arrival + latency).
	Arrive, Depart int64
	// Role is modeltest.Classify's answer; Seed the request's seed (a
	// play's reset seed for agent calls).
	Role string
	Seed int64
}

// serveRound runs the round server: it prints its URL, then answers
// stdin commands: "trace PATH" writes the requests traced since the last
// such command to PATH as JSON lines and answers "ok CPU_NS" (the server
// process's CPU so far) on stdout. EOF ends it.
func serveRound() int {
	spec, err := parseLatencySpec(os.Getenv(latencySpecEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "round server:", err)
		return 2
	}
	var mu sync.Mutex
	var trace []traceRec
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	handler := func(req modeltest.Request) modeltest.Reply {
		arrive := time.Now()
		h := fnv.New64a()
		for _, m := range req.Chat.Messages {
			_, _ = h.Write([]byte(m.Content))
			_, _ = h.Write([]byte{0})
		}
		fmt.Fprintf(h, "%d", req.Chat.Seed)
		reply := base(req)
		role := modeltest.Classify(req.Chat)
		if role == modeltest.RoleDesign {
			src := strings.Replace(modeltest.DefaultEnvSource, "Reach the target total exactly.",
				fmt.Sprintf("Reach the target total exactly (variant %016x).", h.Sum64()), 1)
			for i := range reply.Choices {
				reply.Choices[i].Message.Content = "Here is the environment.\n\n```python\n" + src + "```\n"
			}
		}
		d := spec.draw(h.Sum64())
		reply.Fault = modeltest.Fault{Kind: modeltest.FaultSlow, Delay: d}
		mu.Lock()
		trace = append(trace, traceRec{Arrive: arrive.UnixNano(), Depart: arrive.Add(d).UnixNano(), Role: role, Seed: req.Chat.Seed})
		mu.Unlock()
		return reply
	}
	srv, err := modeltest.New(modeltest.WithHandler(handler), modeltest.WithoutRecording())
	if err != nil {
		fmt.Fprintln(os.Stderr, "round server:", err)
		return 1
	}
	defer srv.Close()
	fmt.Println(srv.URL)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		path, ok := strings.CutPrefix(sc.Text(), "trace ")
		if !ok {
			continue
		}
		mu.Lock()
		recs := trace
		trace = nil
		mu.Unlock()
		f, err := os.Create(path)
		if err == nil {
			enc := json.NewEncoder(f)
			for _, r := range recs {
				_ = enc.Encode(r)
			}
			err = f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "round server:", err)
			return 1
		}
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Printf("ok %d\n", (tv(ru.Utime) + tv(ru.Stime)).Nanoseconds())
	}
	return 0
}

// roundServer is a running round server process.
type roundServer struct {
	URL   string
	cmd   *exec.Cmd
	stdin *os.File
	out   *bufio.Reader
}

// startRoundServer starts the round server with spec and returns it; it
// stops when b ends.
func startRoundServer(b *testing.B, spec latencySpec) *roundServer {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"="+roleRoundServer, latencySpecEnv+"="+spec.String())
	cmd.Stderr = os.Stderr
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdin = inR
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	inR.Close()
	s := &roundServer{cmd: cmd, stdin: inW, out: bufio.NewReader(stdout)}
	b.Cleanup(func() {
		inW.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatalf("round server did not print its URL: %v", err)
	}
	s.URL = strings.TrimSpace(line)
	return s
}

// Trace returns the requests traced since the last call and the server
// process's CPU time so far.
func (s *roundServer) Trace(b *testing.B) ([]traceRec, time.Duration) {
	b.Helper()
	path := fmt.Sprintf("%s/trace-%d.jsonl", b.TempDir(), time.Now().UnixNano())
	if _, err := fmt.Fprintf(s.stdin, "trace %s\n", path); err != nil {
		b.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatalf("round server: %v", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "ok ")), 10, 64)
	if err != nil {
		b.Fatalf("round server answered %q", line)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []traceRec
	dec := json.NewDecoder(f)
	for dec.More() {
		var r traceRec
		if err := dec.Decode(&r); err != nil {
			b.Fatal(err)
		}
		out = append(out, r)
	}
	return out, time.Duration(ns)
}
