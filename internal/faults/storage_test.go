package faults

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// storeURLFor is the s3:// URL of s3server.Bucket/prefix at endpoint
// (path style, test region) with extra query parameters.
func storeURLFor(endpoint, prefix string, extra url.Values) string {
	return (&s3server.Server{Endpoint: endpoint}).StoreURL(prefix, extra)
}

// share maps (seed, n) to [0, 1) deterministically, so a rerun faults the
// same requests.
func share(seed uint64, n int) float64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	_, _ = h.Write(b[:])
	return float64(h.Sum64()>>11) / float64(1<<53)
}

// TestStorageFaultsRound runs two rounds against S3 through a proxy that
// answers 503 SlowDown, resets connections before and after the server saw
// the request, slows answers down and cuts bodies short, on about a
// quarter of all requests. The rounds complete through retries and end
// with the same tables as an uninterrupted local run; every committed file
// matches its manifest's sha256 when read back around the proxy.
func TestStorageFaultsRound(t *testing.T) {
	refRun := referenceRun(t)
	g := s3server.Start(t)
	decide := func(r *http.Request, n int) Action {
		// Let the first requests (Open's HeadBucket probe, which has its own
		// short budget) through, then fault a share of everything.
		if n < 3 {
			return Forward
		}
		switch x := share(7, n); {
		case x < 0.08:
			return Unavailable
		case x < 0.12:
			return ResetBefore
		case x < 0.16:
			return ResetAfter
		case x < 0.22:
			return Slow
		case x < 0.25:
			return CutBody
		}
		return Forward
	}
	p, err := NewProxy(g.Endpoint, decide)
	require.NoError(t, err)
	defer p.Close()
	p.Delay = 200 * time.Millisecond

	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", crashConfig)
	u, err := url.Parse(storeURLFor(p.URL, "faulty", url.Values{"max_attempts": {"12"}}))
	require.NoError(t, err)
	args := []string{"--config", cfg, "--store", u.String()}
	last := 2
	if testing.Short() {
		last = 1
	}
	for round := 1; round <= last; round++ {
		r := spade(t, dir, nil, append(args, "round", fmt.Sprint(round))...)
		require.Equal(t, 0, r.code, "round %d through the faulty proxy: %s", round, tail(r.stderr, 4000))
	}
	for a := Unavailable; a < numActions; a++ {
		require.Positive(t, p.Count(a), "fault %s was injected", a)
		t.Logf("%s: %d of %d requests", a, p.Count(a), p.Requests())
	}
	wantTables, wantSeals := map[tableKey]string{}, map[int]string{}
	for k, d := range refRun.tables {
		if k.Round <= last {
			wantTables[k] = d
		}
	}
	for r, d := range refRun.seals {
		if r <= last {
			wantSeals[r] = d
		}
	}
	tables, seals := statusDigests(t, dir, args...)
	require.Equal(t, wantTables, tables)
	require.Equal(t, wantSeals, seals)

	// Read everything back directly from the server, around the proxy.
	ctx := context.Background()
	direct, err := storage.Open(ctx, storeURLFor(g.Endpoint, "faulty", nil))
	require.NoError(t, err)
	defer direct.Close()
	v := audit(t, ctx, direct, "default", refRun.tables, refRun.seals, nil)
	require.Len(t, v.seals, last+1)
}

// bigCorpus writes a JSONL corpus of docs documents of docBytes random
// lower-case words each (random enough that zstd keeps the Parquet file
// large), seeded so reruns write the same bytes.
func bigCorpus(t testing.TB, path string, docs, docBytes int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(99, 1))
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	enc := json.NewEncoder(f)
	for d := 0; d < docs; d++ {
		var b strings.Builder
		for b.Len() < docBytes {
			n := 2 + rng.IntN(9)
			for i := 0; i < n; i++ {
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
			b.WriteByte(' ')
		}
		require.NoError(t, enc.Encode(map[string]string{"id": fmt.Sprintf("doc-%d", d), "title": fmt.Sprintf("Random document %d", d), "text": b.String()}))
	}
}

// TestStorageRestartMidMultipart imports a corpus whose Parquet file is
// larger than the 5 MiB part size, so it is written by a multipart upload,
// and kills and restarts the S3 server when the second part arrives (that
// request's connection is reset). The import completes through the SDK's
// retries, the object is whole (its sha256 matches the manifest when read
// back directly), and `spade sql` reads every document.
func TestStorageRestartMidMultipart(t *testing.T) {
	g := s3server.Start(t)
	var mu sync.Mutex
	parts, restarts := 0, 0
	var p *Proxy
	decide := func(r *http.Request, n int) Action {
		q := r.URL.Query()
		if r.Method != http.MethodPut || q.Get("uploadId") == "" || q.Get("partNumber") == "" {
			return Forward
		}
		mu.Lock()
		defer mu.Unlock()
		parts++
		if parts == 2 {
			// Not require: this runs on the proxy's goroutine.
			restarts++
			if err := g.Restart(); err != nil {
				t.Errorf("restart versitygw: %v", err)
			} else if err := p.SetUpstream(g.Endpoint); err != nil {
				t.Errorf("repoint proxy: %v", err)
			}
			return ResetBefore
		}
		return Forward
	}
	var err error
	p, err = NewProxy(g.Endpoint, decide)
	require.NoError(t, err)
	defer p.Close()

	dir := t.TempDir()
	src := filepath.Join(dir, "big.jsonl")
	bigCorpus(t, src, 5, 3<<20)
	storeURL := storeURLFor(p.URL, "big", url.Values{"max_attempts": {"10"}, "part_size": {fmt.Sprint(5 << 20)}})
	r := spade(t, dir, nil, "--store", storeURL, "--run", "big", "corpus", "import", src, "--id", "id", "--title", "title")
	require.Equal(t, 0, r.code, "import through a server restart: %s", tail(r.stderr, 4000))
	require.Contains(t, r.stdout, "imported 5 documents")
	require.GreaterOrEqual(t, parts, 3, "the corpus file went up as a multipart upload of >= 2 parts (one retried)")
	require.Equal(t, 1, restarts)

	ctx := context.Background()
	direct, err := storage.Open(ctx, storeURLFor(g.Endpoint, "big", nil))
	require.NoError(t, err)
	defer direct.Close()
	m, err := pipeline.ReadManifest(ctx, direct, pipeline.ManifestKey("big", 0, "corpus"))
	require.NoError(t, err)
	require.Len(t, m.Files, 1)
	require.Greater(t, m.Files[0].Bytes, int64(5<<20), "the corpus file is larger than one part")
	_, err = pipeline.ReadVerified(ctx, direct, m.Files[0])
	require.NoError(t, err, "the multipart object is whole after the restart")
	q := spade(t, dir, nil, "--store", storeURLFor(g.Endpoint, "big", nil), "--run", "big", "sql", "--format", "csv",
		"select count(*), sum(length(text)) > 15000000 from corpus")
	require.Equal(t, 0, q.code, q.stderr)
	require.Contains(t, q.stdout, "5,true")
}

// TestProxyActions checks each proxy action against a plain HTTP server,
// and that the proxy leaves no goroutine behind.
func TestProxyActions(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Host", r.Host)
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = up.Serve(ln) }()
	defer up.Close()

	var next Action
	var mu sync.Mutex
	p, err := NewProxy("http://"+ln.Addr().String(), func(*http.Request, int) Action {
		mu.Lock()
		defer mu.Unlock()
		return next
	})
	require.NoError(t, err)
	defer p.Close()
	p.Delay = 50 * time.Millisecond
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		a      Action
		status int
		body   string
		fails  bool
	}{
		{Forward, 200, "hello /x", false},
		{Slow, 200, "hello /x", false},
		{Unavailable, 503, "SlowDown", false},
		{ResetBefore, 0, "", true},
		{ResetAfter, 0, "", true},
		{CutBody, 200, "", true},
	} {
		t.Run(tc.a.String(), func(t *testing.T) {
			mu.Lock()
			next = tc.a
			mu.Unlock()
			resp, err := client.Get(p.URL + "/x")
			if err == nil {
				defer resp.Body.Close()
				var b strings.Builder
				_, rerr := fmt.Fprint(&b, readAll(resp))
				require.NoError(t, rerr)
				if tc.fails {
					require.NotEqual(t, "hello /x", b.String(), "a cut body must not arrive whole")
					return
				}
				require.Equal(t, tc.status, resp.StatusCode)
				require.Contains(t, b.String(), tc.body)
				if tc.status == 200 {
					require.Equal(t, strings.TrimPrefix(p.URL, "http://"), resp.Header.Get("X-Host"), "the Host header is kept for SigV4")
				}
				return
			}
			require.True(t, tc.fails, "unexpected error: %v", err)
		})
	}
	require.Equal(t, 6, p.Requests())
}

func readAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
