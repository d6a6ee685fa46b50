package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends" // s3://
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/sample"
)

const (
	corpusDocs  = 1_000_000
	corpusParts = 16
	corpusSeed  = 7
)

// genCorpus is a round-0 stage committing the generated corpus in parts,
// through the runner, exactly as an import would.
type genCorpus struct {
	words Words
	docs  int
}

func (*genCorpus) Name() string                    { return "corpus" }
func (*genCorpus) Outputs() []pipeline.Output      { return []pipeline.Output{{Table: "corpus"}} }
func (*genCorpus) ConfigSubset(*config.Config) any { return "bench-generated" }
func (*genCorpus) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 0
}
func (*genCorpus) Parts(context.Context, *pipeline.Env) (int, error) { return corpusParts, nil }
func (g *genCorpus) Run(_ context.Context, _ *pipeline.Env, part int, out *pipeline.Out) error {
	per := g.docs / corpusParts
	pipeline.Emit(out, schemas.Corpus, "corpus", g.words.CorpusDocs(part*per, per, corpusSeed)...)
	return nil
}

// countingProxy is a reverse proxy in front of the S3 server that counts
// the response body bytes and requests the server sends: what the
// server-side byte counter of a real bucket would bill.
type countingProxy struct {
	bytes, requests atomic.Int64
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func startProxy(b *testing.B, target string) (*countingProxy, string) {
	b.Helper()
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	cp := &countingProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // SigV4 signed the proxy's host
		},
		ModifyResponse: func(resp *http.Response) error {
			cp.requests.Add(1)
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &cp.bytes}
			return nil
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return cp, "http://" + ln.Addr().String()
}

type docRef struct {
	DocID  string `parquet:"doc_id"`
	Domain string `parquet:"domain"`
}

// BenchmarkCorpusSample commits a generated 1,000,000-document corpus
// (CorpusDocs: 1-2 KB of text each, 16 part files written by the
// project's writer through pipeline.Runner) to a real S3-compatible server
// (versitygw), then samples one round's documents: the sample stage itself
// (24 slots), and pipeline.ReadRowsAt of 24 and 2,400 random rows with the
// stage's projection (doc_id, domain). Bytes read are counted at the client
// (storage.Counting) and at the server (a counting reverse proxy). Targets:
// < 5% of the corpus bytes, < 2 s.
func BenchmarkCorpusSample(b *testing.B) {
	ctx := context.Background()
	srv := s3server.Start(b)
	proxy, endpoint := startProxy(b, srv.Endpoint)
	q := url.Values{"endpoint": {endpoint}, "region": {s3server.Region}, "path_style": {"true"}}
	storeURL := (&url.URL{Scheme: "s3", Host: s3server.Bucket, Path: "/bench", RawQuery: q.Encode()}).String()
	st, err := storage.Open(ctx, storeURL)
	if err != nil {
		b.Fatal(err)
	}
	words, err := EmbeddedWords()
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Workers = 2
	gen := &pipeline.Runner{Store: st, Run: "corpus1m", Config: cfg, Stages: []pipeline.Stage{&genCorpus{words: words, docs: corpusDocs}}}
	wall, c := measure(b, func() {
		if _, err := gen.RunRound(ctx, 0); err != nil {
			b.Fatal(err)
		}
	})
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey("corpus1m", 0, "corpus"))
	if err != nil {
		b.Fatal(err)
	}
	const s = "5. corpus sampling"
	rec.Add(s, fmt.Sprintf("commit the generated corpus: %d documents, %d part files, %.0f MB", m.Rows, len(m.Files), float64(m.Bytes)/1e6), "s", []float64{wall.Seconds()}, Target{}, fmt.Sprintf("%.0f CPU-s incl. versitygw; generation + encode + upload", c.Seconds()))
	if m.Rows != corpusDocs {
		b.Fatalf("corpus has %d rows, want %d", m.Rows, corpusDocs)
	}
	for range b.N {
		// The sample stage, as a round runs it.
		cs := storage.Counting(st)
		proxy.bytes.Store(0)
		proxy.requests.Store(0)
		r := &pipeline.Runner{Store: cs, Run: "corpus1m", Config: cfg, Stages: []pipeline.Stage{sample.Stage{}}}
		wall, _ := measure(b, func() {
			if _, err := r.RunRound(ctx, 1); err != nil {
				b.Fatal(err)
			}
		})
		cnt := cs.Counts()
		rec.Add(s, "sample stage, 24 slots (RunRound incl. manifests, commit and seal): wall clock", "s", []float64{wall.Seconds()}, AtMost(2), fmt.Sprintf("%d requests", cnt.Requests()))
		rec.Add(s, "sample stage: bytes read at the client / corpus bytes", "%", []float64{100 * float64(cnt.BytesRead) / float64(m.Bytes)}, AtMost(5), fmt.Sprintf("%s bytes read", FormatNumber(float64(cnt.BytesRead))))
		rec.Add(s, "sample stage: bytes sent by the server / corpus bytes", "%", []float64{100 * float64(proxy.bytes.Load()) / float64(m.Bytes)}, AtMost(5), fmt.Sprintf("%s bytes in %d responses (writes' responses included)", FormatNumber(float64(proxy.bytes.Load())), proxy.requests.Load()))

		// ReadRowsAt alone, repeated with different draws.
		for _, k := range []int{24, 2400} {
			var secs, client, server, reqs []float64
			for rep := range 3 {
				rng := rand.New(rand.NewPCG(uint64(k), uint64(rep)))
				idx := make([]int64, k)
				for i := range idx {
					idx[i] = rng.Int64N(m.Rows)
				}
				cs := storage.Counting(st)
				proxy.bytes.Store(0)
				var got []docRef
				wall, _ := measure(b, func() {
					if got, err = pipeline.ReadRowsAt[docRef](ctx, cs, m, idx); err != nil {
						b.Fatal(err)
					}
				})
				for i, g := range got {
					if want := fmt.Sprintf("gen-%07d", idx[i]); g.DocID != want {
						b.Fatalf("row %d: doc_id %q, want %q", idx[i], g.DocID, want)
					}
				}
				secs = append(secs, wall.Seconds())
				client = append(client, 100*float64(cs.Counts().BytesRead)/float64(m.Bytes))
				reqs = append(reqs, float64(cs.Counts().Requests()))
				server = append(server, 100*float64(proxy.bytes.Load())/float64(m.Bytes))
			}
			name := fmt.Sprintf("ReadRowsAt of %d random rows (doc_id, domain)", k)
			tgt := Target{}
			if k == 24 {
				tgt = AtMost(2)
			}
			rec.Add(s, name+": wall clock", "s", secs, tgt, "")
			rec.Add(s, name+": client bytes / corpus bytes", "%", client, AtMost(5), "")
			rec.Add(s, name+": server bytes / corpus bytes", "%", server, AtMost(5), "")
			rec.Add(s, name+": store requests", "requests", reqs, Target{}, "Stat + GetRange calls through storage.Counting")
		}
	}
}
