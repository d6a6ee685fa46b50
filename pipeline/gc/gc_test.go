package gc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/diff"
	"github.com/spade-pipeline/spade/pipeline/gc"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	_ "github.com/spade-pipeline/spade/pipeline/storage/s3store"
	"github.com/spade-pipeline/spade/schemas"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// walk writes three parts of metrics per round, each depending on the
// previous round's rows.
type walk struct{}

func (walk) Name() string               { return "walk" }
func (walk) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "metrics"}} }
func (walk) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return []pipeline.Input{{Table: "metrics", Round: ri.Round - 1, Optional: ri.Round == 1}}, ri.Round > 0
}
func (walk) ConfigSubset(c *config.Config) any                 { return c.Seed }
func (walk) Parts(context.Context, *pipeline.Env) (int, error) { return 3, nil }
func (walk) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	prev, err := pipeline.ReadAll(ctx, env, schemas.Metrics, "metrics", env.Round.Round-1)
	if err != nil {
		return err
	}
	for i := part; i < 9; i += 3 {
		pipeline.Emit(out, schemas.Metrics, "metrics", schemas.Metric{Name: fmt.Sprintf("m%d", i), Value: float64(len(prev)) + float64(env.Round.Seed)*float64(i)})
	}
	return nil
}

// clock is a settable clock for the store's ModTime and gc's Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func runner(s storage.Store, run string, seed int64) *pipeline.Runner {
	cfg := config.Default()
	cfg.Seed, cfg.Workers = seed, 2
	return &pipeline.Runner{Store: s, Run: run, Config: cfg, Stages: []pipeline.Stage{walk{}}, Log: slog.New(slog.DiscardHandler)}
}

func keys(objs []gc.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// readEverything reads every row of every committed manifest in the store.
func readEverything(t *testing.T, s storage.Store) int {
	t.Helper()
	ctx := context.Background()
	infos, err := s.List(ctx, "")
	require.NoError(t, err)
	n := 0
	for _, in := range infos {
		if !strings.HasSuffix(in.Key, "/_manifest.json") {
			continue
		}
		m, err := pipeline.ReadManifest(ctx, s, in.Key)
		require.NoError(t, err)
		var rows int64
		require.NoError(t, diff.ReadRows(ctx, s, m, func(reflect.Value) error { rows++; return nil }), in.Key)
		require.Equal(t, m.Rows, rows, in.Key)
		n++
	}
	return n
}

// addPointerManifest commits round 2's metrics manifest of a run
// "pointer" that also lists a copy of src's first metrics file, stored in
// src's directory, and returns the copy's key; split out of TestCollect.
func addPointerManifest(t *testing.T, ctx context.Context, s storage.Store) string {
	t.Helper()
	m, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey("src", 2, "metrics"))
	require.NoError(t, err)
	data, err := storage.ReadAll(ctx, s, m.Files[0].Key)
	require.NoError(t, err)
	copied := m.Files[0]
	copied.Key = pipeline.PartKey("src", 2, "metrics", 5, 9, copied.SHA256)
	pointedTo := copied.Key
	require.NoError(t, storage.PutBytes(ctx, s, pointedTo, data))
	m.Run = "pointer"
	m.Files = append(m.Files, copied)
	m.Bytes += copied.Bytes
	m.Rows += copied.Rows
	require.NoError(t, storage.PutBytes(ctx, s, pipeline.ManifestKey("pointer", 2, "metrics"), m.Encode()))
	return pointedTo
}

func TestCollect(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetClock(clk.now)
	t0 := clk.now()

	src := runner(s, "src", 3)
	for r := 0; r <= 2; r++ {
		_, err := src.RunRound(ctx, r)
		require.NoError(t, err)
	}
	fork := runner(s, "fork", 4)
	_, err := pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 1, Target: "fork", Config: fork.Config})
	require.NoError(t, err)
	_, err = fork.RunRound(ctx, 2)
	require.NoError(t, err)
	// A sharded stage half done: shard 0 of 2 of round 3 written, not
	// committed. Its part record is live, its files must survive.
	_, err = src.RunStage(ctx, 3, "walk", pipeline.Shard{Index: 0, Count: 2}, false)
	require.NoError(t, err)

	sha := strings.Repeat("ab", 32)
	oldOrphan := pipeline.PartKey("src", 1, "metrics", 0, 3, strings.Repeat("0", 64))
	staleRecord := pipeline.PendingKey("src", 1, "walk", sha, 0)
	otherRun := pipeline.PartKey("fork", 2, "metrics", 7, 9, sha)
	for _, k := range []string{oldOrphan, otherRun} {
		require.NoError(t, storage.PutBytes(ctx, s, k, []byte("orphan parquet")))
	}
	require.NoError(t, storage.PutBytes(ctx, s, staleRecord, []byte(`{"files":{"metrics":{"key":"`+oldOrphan+`"}}}`)))
	// A manifest of a third run lists pointedTo, which lives in src's
	// directory: it is referenced, whatever run gc collects.
	pointedTo := addPointerManifest(t, ctx, s)

	clk.set(t0.Add(30 * time.Hour))
	freshOrphan := pipeline.PartKey("src", 2, "metrics", 1, 3, strings.Repeat("1", 64))
	require.NoError(t, storage.PutBytes(ctx, s, freshOrphan, []byte("fresh")))
	clk.set(t0.Add(30*time.Hour + 10*time.Minute))
	before := readEverything(t, s)

	t.Run("dry run lists and deletes nothing", func(t *testing.T) {
		res, err := gc.Collect(ctx, s, gc.Options{Grace: time.Hour, DryRun: true, Now: clk.now})
		require.NoError(t, err)
		require.Equal(t, []string{otherRun, staleRecord, oldOrphan, freshOrphan}, keys(res.Garbage), "sorted by key")
		require.Zero(t, res.Deleted)
		for _, g := range res.Garbage {
			require.Equal(t, g.Key == freshOrphan, g.WithinGrace, g.Key)
			_, err := s.Stat(ctx, g.Key)
			require.NoError(t, err)
		}
	})
	t.Run("one run only", func(t *testing.T) {
		res, err := gc.Collect(ctx, s, gc.Options{Run: "fork", Grace: time.Hour, Now: clk.now})
		require.NoError(t, err)
		require.Equal(t, []string{otherRun}, keys(res.Garbage))
		require.Equal(t, 1, res.Deleted)
		_, err = s.Stat(ctx, otherRun)
		require.ErrorIs(t, err, storage.ErrNotFound)
		_, err = s.Stat(ctx, oldOrphan)
		require.NoError(t, err)
	})
	t.Run("whole store honours grace and every reference", func(t *testing.T) {
		res, err := gc.Collect(ctx, s, gc.Options{Grace: time.Hour, Now: clk.now})
		require.NoError(t, err)
		require.Equal(t, 2, res.Deleted)
		for _, k := range []string{oldOrphan, staleRecord} {
			_, err := s.Stat(ctx, k)
			require.ErrorIs(t, err, storage.ErrNotFound, k)
		}
		for _, k := range []string{freshOrphan, pointedTo} {
			_, err := s.Stat(ctx, k)
			require.NoError(t, err, k)
		}
		require.Equal(t, before, readEverything(t, s), "every committed table of every run is still readable")
		// The half-done sharded stage still commits after gc.
		_, err = src.RunStage(ctx, 3, "walk", pipeline.Shard{Index: 1, Count: 2}, false)
		require.NoError(t, err)
		_, err = src.CommitStage(ctx, 3, "walk")
		require.NoError(t, err)
		_, err = src.RunRound(ctx, 3)
		require.NoError(t, err)
		// A second collection past the grace period takes the fresh orphan.
		clk.set(t0.Add(40 * time.Hour))
		res, err = gc.Collect(ctx, s, gc.Options{Grace: time.Hour, Now: clk.now})
		require.NoError(t, err)
		require.Equal(t, []string{freshOrphan}, keys(res.Garbage))
		readEverything(t, s)
	})
	t.Run("unreadable inputs", func(t *testing.T) {
		// A malformed live part record protects its round's parts.
		bad := pipeline.PendingKey("src", 9, "walk", sha, 0)
		orphan := pipeline.PartKey("src", 9, "metrics", 0, 1, sha)
		require.NoError(t, storage.PutBytes(ctx, s, bad, []byte("{not json")))
		require.NoError(t, storage.PutBytes(ctx, s, orphan, []byte("x")))
		clk.set(t0.Add(80 * time.Hour))
		res, err := gc.Collect(ctx, s, gc.Options{Grace: time.Hour, Now: clk.now})
		require.NoError(t, err)
		require.Len(t, res.Warnings, 1)
		require.Contains(t, res.Warnings[0], bad)
		_, err = s.Stat(ctx, orphan)
		require.NoError(t, err)
		// A manifest gc cannot decode stops it: it cannot know what it lists.
		require.NoError(t, storage.PutBytes(ctx, s, pipeline.ManifestKey("src", 9, "metrics"), []byte(`{"format_version": 99}`)))
		_, err = gc.Collect(ctx, s, gc.Options{Grace: time.Hour, Now: clk.now})
		require.ErrorIs(t, err, pipeline.ErrUnknownVersion)
	})
	t.Run("bad options", func(t *testing.T) {
		_, err := gc.Collect(ctx, s, gc.Options{Grace: -time.Second})
		require.Error(t, err)
		_, err = gc.Collect(ctx, s, gc.Options{Run: "../x"})
		require.Error(t, err)
	})
}

// pair writes two tables per part, so its commit writes two manifests.
type pair struct{ runs *atomic.Int64 }

func (pair) Name() string { return "pair" }
func (pair) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "first", Kind: "metrics"}, {Table: "second", Kind: "metrics"}}
}
func (pair) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round > 0
}
func (pair) ConfigSubset(c *config.Config) any                 { return c.Seed }
func (pair) Parts(context.Context, *pipeline.Env) (int, error) { return 2, nil }
func (p pair) Run(_ context.Context, _ *pipeline.Env, part int, out *pipeline.Out) error {
	p.runs.Add(1)
	pipeline.Emit(out, schemas.Metrics, "first", schemas.Metric{Name: fmt.Sprintf("f%d", part), Value: 1})
	pipeline.Emit(out, schemas.Metrics, "second", schemas.Metric{Name: fmt.Sprintf("s%d", part), Value: 2})
	return nil
}

// A commit cut short between a stage's two manifests (a kill, a full disk)
// leaves the stage's first table committed and its second one waiting for
// the part records. gc must keep those records and the second table's
// files: it used to call the stage committed and delete both, so the
// resume ran every part again (new model calls, and with a sampled model
// a second table that no longer matches the first).
func TestCollectKeepsAHalfCommittedStage(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetClock(clk.now)
	var runs atomic.Int64
	cfg := config.Default()
	cfg.Workers = 1
	r := &pipeline.Runner{Store: s, Run: "half", Config: cfg, Stages: []pipeline.Stage{pair{&runs}}, Log: slog.New(slog.DiscardHandler)}
	_, err := r.RunRound(ctx, 0) // round 1's stages need round 0 sealed
	require.NoError(t, err)
	_, err = r.RunStage(ctx, 1, "pair", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	require.EqualValues(t, 2, runs.Load())
	second := pipeline.ManifestKey("half", 1, "second")
	want, err := pipeline.ReadManifest(ctx, s, second)
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, second)) // the kill between the two manifests

	clk.set(clk.now().Add(48 * time.Hour))
	res, err := gc.Collect(ctx, s, gc.Options{Grace: time.Hour, Now: clk.now})
	require.NoError(t, err)
	require.Empty(t, res.Garbage, "the half-committed stage's part records and files are live")
	for _, f := range want.Files {
		_, err := s.Stat(ctx, f.Key)
		require.NoError(t, err, f.Key)
	}

	_, err = r.RunStage(ctx, 1, "pair", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	require.EqualValues(t, 2, runs.Load(), "the resume commits from the kept part records without running a part again")
	got, err := pipeline.ReadManifest(ctx, s, second)
	require.NoError(t, err)
	require.Equal(t, want.ContentDigest(), got.ContentDigest())

	// Once every table is committed, the records are stale.
	res, err = gc.Collect(ctx, s, gc.Options{Grace: 0, Now: clk.now})
	require.NoError(t, err)
	require.Len(t, res.Garbage, 2)
	for _, g := range res.Garbage {
		require.Equal(t, gc.KindPending, g.Kind, g.Key)
		require.Contains(t, g.Why, "which is committed")
	}
}

// TestCollectTempFiles: a writer killed mid-write (kill -9 during a part
// file's or a record's Put) leaves a ".spade-tmp-*" file that no key
// names and List never shows; gc used to keep every one of them forever.
// It now deletes those older than the grace period, of the selected run
// only, and nothing else.
func TestCollectTempFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := filestore.New(root)
	require.NoError(t, err)
	for _, run := range []string{"a", "b"} {
		r := runner(s, run, 3)
		for n := 0; n <= 1; n++ {
			_, err := r.RunRound(ctx, n)
			require.NoError(t, err)
		}
	}
	before := readEverything(t, s)
	now := time.Now()
	write := func(rel string, age time.Duration) string {
		p := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("half a part file"), 0o600))
		require.NoError(t, os.Chtimes(p, now.Add(-age), now.Add(-age)))
		return rel
	}
	old := write("a/round=000001/metrics/"+filestore.TempPrefix+"1", 48*time.Hour)
	oldRecord := write("a/round=000002/_pending/walk-0123456789abcdef/"+filestore.TempPrefix+"2", 48*time.Hour)
	fresh := write("a/round=000001/metrics/"+filestore.TempPrefix+"3", time.Minute)
	otherRun := write("b/round=000001/metrics/"+filestore.TempPrefix+"4", 48*time.Hour)

	res, err := gc.Collect(ctx, s, gc.Options{Run: "a", Grace: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []string{old, fresh, oldRecord}, keys(res.Garbage))
	for _, g := range res.Garbage {
		require.Equal(t, gc.KindTemp, g.Kind, g.Key)
		require.Equal(t, g.Key != fresh, g.Deleted, g.Key)
	}
	require.Equal(t, 2, res.Deleted)
	for k, gone := range map[string]bool{old: true, oldRecord: true, fresh: false, otherRun: false} {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(k)))
		require.Equal(t, gone, errors.Is(err, fs.ErrNotExist), k)
	}
	_, err = os.Stat(filepath.Join(root, "a", "round=000002", "_pending"))
	require.ErrorIs(t, err, fs.ErrNotExist, "the directory the temp file held open is gone")
	require.Equal(t, before, readEverything(t, s), "every committed table is still readable")
}

// TestCollectIncompleteUploads: on S3 a writer killed during a multipart
// Put (a part file over part_size) leaves an incomplete multipart upload:
// its parts are stored and billed, no key names them, and S3 keeps them
// until someone aborts the upload. gc used to ignore them. It now aborts
// those older than the grace period, of the selected run only, and
// nothing else.
func TestCollectIncompleteUploads(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	s, err := storage.Open(ctx, srv.StoreURL("gc", nil))
	require.NoError(t, err)
	defer s.Close()
	for _, run := range []string{"a", "b"} {
		_, err := runner(s, run, 3).RunRound(ctx, 0)
		require.NoError(t, err)
	}
	before := readEverything(t, s)
	cl := srv.Client()
	start := func(key string) string {
		full := "gc/" + key
		up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3server.Bucket), Key: &full})
		require.NoError(t, err)
		_, err = cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s3server.Bucket), Key: &full, UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("first part of a killed upload")})
		require.NoError(t, err)
		return key + "?uploadId=" + aws.ToString(up.UploadId)
	}
	mine := start("a/round=000000/metrics/part-00000-of-00001-0123456789abcdef.parquet")
	other := start("b/round=000000/metrics/part-00000-of-00001-0123456789abcdef.parquet")

	// Within the grace period: listed, kept.
	res, err := gc.Collect(ctx, s, gc.Options{Run: "a", Grace: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []string{mine}, keys(res.Garbage))
	g := res.Garbage[0]
	require.Equal(t, gc.KindTemp, g.Kind)
	require.Equal(t, int64(len("first part of a killed upload")), g.Bytes)
	require.True(t, g.WithinGrace)
	require.False(t, g.Deleted)

	// Past it: aborted.
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	res, err = gc.Collect(ctx, s, gc.Options{Run: "a", Grace: time.Hour, Now: later})
	require.NoError(t, err)
	require.Equal(t, []string{mine}, keys(res.Garbage))
	require.True(t, res.Garbage[0].Deleted)
	require.Equal(t, 1, res.Deleted)

	left, err := cl.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s3server.Bucket), Prefix: aws.String("gc/")})
	require.NoError(t, err)
	var still []string
	for _, u := range left.Uploads {
		still = append(still, strings.TrimPrefix(aws.ToString(u.Key), "gc/")+"?uploadId="+aws.ToString(u.UploadId))
	}
	require.Equal(t, []string{other}, still, "only the other run's upload is left")
	require.Equal(t, before, readEverything(t, s), "every committed table is still readable")
}

// TestCollectWithoutMultipartListing: a bucket policy may allow
// ListObjectsV2 but deny ListMultipartUploads. gc then removes the part
// files as before, keeps every incomplete upload, and says so in a
// warning instead of failing.
func TestCollectWithoutMultipartListing(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	target, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	var denied atomic.Int32
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // keep the host the client signed
		},
		ModifyResponse: func(r *http.Response) error {
			if r.Request.Method == http.MethodGet && r.Request.URL.Query().Has("uploads") {
				denied.Add(1)
				r.Body.Close()
				body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`
				r.StatusCode, r.Status = http.StatusForbidden, "403 Forbidden"
				r.Body = io.NopCloser(strings.NewReader(body))
				r.ContentLength = int64(len(body))
				r.Header.Set("Content-Length", fmt.Sprint(len(body)))
			}
			return nil
		},
	})
	defer proxy.Close()
	q := url.Values{"endpoint": {proxy.URL}, "region": {s3server.Region}, "path_style": {"true"}, "max_attempts": {"1"}}
	s, err := storage.Open(ctx, fmt.Sprintf("s3://%s/deny?%s", s3server.Bucket, q.Encode()))
	require.NoError(t, err)
	defer s.Close()
	_, err = runner(s, "a", 3).RunRound(ctx, 0)
	require.NoError(t, err)
	orphan := "a/round=000000/metrics/part-00000-of-00001-0123456789abcdef.parquet"
	require.NoError(t, storage.PutBytes(ctx, s, orphan, []byte("not listed by any manifest")))

	res, err := gc.Collect(ctx, s, gc.Options{Run: "a", Grace: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	require.NoError(t, err)
	require.Positive(t, denied.Load(), "the listing went through the proxy")
	require.Equal(t, []string{orphan}, keys(res.Garbage))
	require.True(t, res.Garbage[0].Deleted)
	require.Len(t, res.Warnings, 1)
	require.Contains(t, res.Warnings[0], "temp objects not listed, none removed")
	require.Contains(t, res.Warnings[0], "AccessDenied")
}

// TestCollectKeepsObjectsOfUnknownAge: an object the store lists without
// a modification time (an S3-compatible server that omits LastModified, or
// an incomplete upload's Initiated) has a zero ModTime, which gc took for
// older than any grace period and deleted at once, although it may be a
// part being written right now. It is kept, as within the grace period.
func TestCollectKeepsObjectsOfUnknownAge(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	defer memstore.Forget(t.Name())
	_, err := runner(s, "a", 3).RunRound(ctx, 0)
	require.NoError(t, err)
	s.SetClock(func() time.Time { return time.Time{} })
	orphan := "a/round=000000/metrics/part-00000-of-00001-0123456789abcdef.parquet"
	require.NoError(t, storage.PutBytes(ctx, s, orphan, []byte("no manifest lists it")))

	res, err := gc.Collect(ctx, s, gc.Options{Run: "a", Grace: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	require.NoError(t, err)
	require.Equal(t, []string{orphan}, keys(res.Garbage))
	require.True(t, res.Garbage[0].ModTime.IsZero())
	require.True(t, res.Garbage[0].WithinGrace)
	require.False(t, res.Garbage[0].Deleted)
	require.Zero(t, res.Deleted)
	_, err = s.Stat(ctx, orphan)
	require.NoError(t, err, "the object of unknown age is still there")
}

// TestCollectLeavesOtherUploads: on S3, ListTemp lists every incomplete
// multipart upload under the store's prefix, including those of other
// tools that share it (a store at a bucket's root). gc --all-runs used to
// abort them all past the grace period; it now aborts only uploads under
// the directory of a spade run (one with a run file).
func TestCollectLeavesOtherUploads(t *testing.T) {
	ctx := context.Background()
	srv := s3server.Start(t)
	s, err := storage.Open(ctx, srv.StoreURL("shared", nil))
	require.NoError(t, err)
	defer s.Close()
	_, err = runner(s, "a", 3).RunRound(ctx, 0)
	require.NoError(t, err)
	cl := srv.Client()
	start := func(key string) string {
		full := "shared/" + key
		up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s3server.Bucket), Key: &full})
		require.NoError(t, err)
		return key + "?uploadId=" + aws.ToString(up.UploadId)
	}
	mine := start("a/round=000000/metrics/part-00000-of-00001-0123456789abcdef.parquet")
	theirs := start("backups/db.tar")
	noRun := start("b/round=000000/metrics/part-00000-of-00001-0123456789abcdef.parquet")

	later := func() time.Time { return time.Now().Add(48 * time.Hour) }
	res, err := gc.Collect(ctx, s, gc.Options{Grace: time.Hour, Now: later})
	require.NoError(t, err)
	require.Equal(t, []string{mine}, keys(res.Garbage))
	require.True(t, res.Garbage[0].Deleted)

	left, err := cl.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s3server.Bucket), Prefix: aws.String("shared/")})
	require.NoError(t, err)
	var still []string
	for _, u := range left.Uploads {
		still = append(still, strings.TrimPrefix(aws.ToString(u.Key), "shared/")+"?uploadId="+aws.ToString(u.UploadId))
	}
	sort.Strings(still)
	want := []string{theirs, noRun}
	sort.Strings(want)
	require.Equal(t, want, still, "uploads outside a spade run are not gc's")
}

// TestCollectNoSuchRun: gc of a run with nothing in the store is an error
// naming it (a mistyped --run used to print an empty summary and exit 0);
// a run with only uncommitted part files (its first command failed before
// creating the run file) is still collected, and collecting every run of
// an empty store is no error.
func TestCollectNoSuchRun(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetClock(clk.now)

	res, err := gc.Collect(ctx, s, gc.Options{Now: clk.now})
	require.NoError(t, err, "every run of an empty store")
	require.Empty(t, res.Garbage)
	_, err = gc.Collect(ctx, s, gc.Options{Run: "nosuch", Now: clk.now})
	require.ErrorIs(t, err, pipeline.ErrNotCommitted)
	require.EqualError(t, err, "run nosuch does not exist in "+s.URL()+" (no key under nosuch/)")

	orphan := "failed/round=000000/corpus/part-00000-of-00001-0123456789abcdef.parquet"
	require.NoError(t, storage.PutBytes(ctx, s, orphan, []byte("x")))
	clk.set(clk.now().Add(48 * time.Hour))
	res, err = gc.Collect(ctx, s, gc.Options{Run: "failed", Grace: time.Hour, Now: clk.now})
	require.NoError(t, err)
	require.Equal(t, 1, res.Deleted)
	require.Equal(t, orphan, res.Garbage[0].Key)
	// A run name that is a prefix of another's is not that run.
	_, err = gc.Collect(ctx, s, gc.Options{Run: "fail", Now: clk.now})
	require.ErrorIs(t, err, pipeline.ErrNotCommitted)
}
