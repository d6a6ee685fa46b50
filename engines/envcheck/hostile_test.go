package envcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sourcegraph/conc/pool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/sandbox"
)

// expectation is a hostile file's "# expect: CHECK KINDS" header: the check
// that must fail first and the acceptable sandbox error kinds ("-" for a
// failure without a sandbox error).
type expectation struct {
	check string
	kinds []string
}

func parseExpect(t *testing.T, src string) expectation {
	t.Helper()
	line, _, _ := strings.Cut(src, "\n")
	fields := strings.Fields(strings.TrimPrefix(line, "# expect:"))
	require.Len(t, fields, 2, "header %q", line)
	kinds := strings.Split(fields[1], "|")
	for i, k := range kinds {
		if k == "-" {
			kinds[i] = ""
		}
	}
	return expectation{check: fields[0], kinds: kinds}
}

// snapshot lists a directory's entries with sizes and modification times.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out[e.Name()] = fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
	}
	return out
}

// uidCommands lists "pid: command line" of the live (non-zombie) processes
// whose real uid is uid.
func uidCommands(uid int) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil || !strings.Contains(string(b), fmt.Sprintf("\nUid:\t%d\t", uid)) || strings.Contains(string(b), "State:\tZ") {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

// processesWith lists host pids whose command line contains marker.
func processesWith(marker string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) {
			found = append(found, e.Name()+":"+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// hostileListener starts a loopback listener on the host that counts the
// connections it accepts, and returns its port, the count and a function
// that stops it; split out of TestHostileSuite.
func hostileListener(t *testing.T) (int, *atomic.Int32, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := new(atomic.Int32)
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, conns, func() { ln.Close(); <-acceptDone }
}

// hostileItem is one program TestHostileSuite validates; valid marks the
// documentation's examples, which must pass.
type hostileItem struct {
	name, src string
	valid     bool
}

// hostileItems returns testdata/hostile's programs with their
// placeholders filled in (port, hostDir, marker) and, twice each and
// interleaved, the documentation's valid examples; split out of
// TestHostileSuite.
func hostileItems(t *testing.T, port int, hostDir, marker string) []hostileItem {
	t.Helper()
	files, err := filepath.Glob("testdata/hostile/*.py")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 25)
	var items []hostileItem
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src := strings.NewReplacer("{{PORT}}", fmt.Sprint(port), "{{HOSTDIR}}", hostDir, "{{MARKER}}", marker).Replace(string(b))
		items = append(items, hostileItem{name: filepath.Base(f), src: src})
	}
	for _, f := range []string{"../../docs/examples/guess_game.py", "../../docs/examples/bank_tooluse.py"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		// Twice each, interleaved with the hostile programs.
		items = append(items, hostileItem{name: filepath.Base(f), src: string(b), valid: true})
		items = append([]hostileItem{{name: filepath.Base(f) + "#2", src: string(b), valid: true}}, items...)
	}
	return items
}

// TestHostileSuite validates every program under testdata/hostile together
// with the valid examples, two sandboxes at a time. Each hostile program must
// be rejected by its expected check within its limits, the valid examples
// must pass in the same batch, and nothing may leak out: no credential, no
// connection to the host, no file written outside the sandbox's tmpfs, no
// process left behind.
func TestHostileSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("hostile suite takes ~1 minute on a loaded 2-core machine")
	}
	const secret = "hostile-suite-parent-secret-7f3a"
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)

	// A host directory the sandbox must neither read nor write, made
	// world-readable so only the sandbox's mount namespace protects it.
	hostDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(hostDir, "secret.txt"), []byte("host-file-secret-91c2"), 0o644))
	for d := hostDir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	repoRoot, err := filepath.Abs("../..")
	require.NoError(t, err)
	beforeHost, beforeRepo := snapshot(t, hostDir), snapshot(t, repoRoot)
	for _, p := range []string{"/usr/planted.txt", "/root/planted.txt", "/planted.txt", "/work/main/planted.txt"} {
		_, err := os.Stat(p)
		require.True(t, os.IsNotExist(err), "%s exists before the test", p)
	}

	// A loopback listener on the host that no sandbox may reach.
	port, conns, stopListener := hostileListener(t)
	defer stopListener()
	marker := fmt.Sprintf("4242.%06d", os.Getpid()%1000000)

	sb, err := sandbox.New(sandbox.Config{
		Strict: true, Workers: 2,
		CallTimeout: 2 * time.Second, CPUSeconds: 4, MemoryBytes: 512 << 20,
		OutputBytes: 256 << 10, ReplyBytes: 1 << 20,
	})
	require.NoError(t, err)
	defer sb.Close()

	items := hostileItems(t, port, hostDir, marker)

	var mu sync.Mutex
	reports := map[string]Report{}
	elapsed := map[string]time.Duration{}
	p := pool.New().WithMaxGoroutines(4)
	for _, it := range items {
		p.Go(func() {
			start := time.Now()
			rep := Check(context.Background(), sb, it.src, Options{Timeout: 45 * time.Second})
			mu.Lock()
			reports[it.name], elapsed[it.name] = rep, time.Since(start)
			mu.Unlock()
		})
	}
	p.Wait()

	for _, it := range items {
		rep := reports[it.name]
		t.Run(it.name, func(t *testing.T) {
			raw, _ := json.Marshal(rep)
			assert.NotContains(t, string(raw), secret, "parent credential leaked")
			assert.NotContains(t, string(raw), "host-file-secret-91c2", "host file leaked")
			assert.Less(t, elapsed[it.name], 40*time.Second, "validation took too long")
			if it.valid {
				assert.True(t, rep.Valid, "valid example rejected: %s", raw)
				return
			}
			want := parseExpect(t, it.src)
			require.False(t, rep.Valid, "hostile program accepted: %s", raw)
			assert.Equal(t, want.check, rep.Reason, "report: %s", raw)
			var failed Result
			for _, r := range rep.Checks {
				if r.Name == rep.Reason {
					failed = r
				}
			}
			assert.Contains(t, want.kinds, failed.ErrorKind, "failing check: %+v", failed)
			assert.NotEmpty(t, failed.Detail)
		})
	}

	assert.Zero(t, conns.Load(), "a sandbox reached the host's loopback listener")
	assert.Empty(t, processesWith(marker), "a daemon survived its sandbox")
	// Between programs a slot keeps only its zygote (bwrap and the harness
	// as the pid namespace's init); every program's processes are gone.
	for _, uid := range sb.SlotUIDs() {
		for _, cmd := range uidCommands(uid) {
			assert.True(t, strings.Contains(cmd, "bwrap") || strings.Contains(cmd, "spade_run.py"),
				"slot uid %d runs %q between programs", uid, cmd)
		}
	}
	require.NoError(t, sb.Close())
	for _, uid := range sb.SlotUIDs() {
		assert.Empty(t, uidCommands(uid), "processes of slot uid %d remain after Close", uid)
	}
	assert.Equal(t, beforeHost, snapshot(t, hostDir), "host directory changed")
	afterRepo := snapshot(t, repoRoot)
	for name := range afterRepo {
		if _, ok := beforeRepo[name]; !ok && strings.Contains(name, "planted") {
			t.Errorf("file %s appeared in the checkout", name)
		}
	}
	for _, p := range []string{"/usr/planted.txt", "/root/planted.txt", "/planted.txt", "/work/main/planted.txt"} {
		_, err := os.Stat(p)
		assert.True(t, os.IsNotExist(err), "%s was written", p)
	}
	names := make([]string, 0, len(reports))
	for n := range reports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%-32s %-14s %6.2fs", n, reports[n].Reason, elapsed[n].Seconds())
	}
}
