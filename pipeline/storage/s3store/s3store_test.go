package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/s3store"
	"github.com/spade-pipeline/spade/pipeline/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// smallParts makes the suite's large object (11 MiB) a 3-part upload.
var smallParts = url.Values{"part_size": {fmt.Sprint(s3store.MinPartSize)}}

var prefixSeq atomic.Int64

func TestConformance(t *testing.T) {
	srv := s3server.Start(t)
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, err := storage.Open(context.Background(), srv.StoreURL(fmt.Sprintf("conformance/%d", prefixSeq.Add(1)), smallParts))
		require.NoError(t, err)
		return s
	})
}

func TestConformanceBucketRoot(t *testing.T) {
	// No prefix: keys are the object names. Each store gets its own bucket.
	srv := s3server.Start(t)
	c := srv.Client()
	storagetest.Run(t, func(t *testing.T) storage.Store {
		bucket := fmt.Sprintf("root-%d", prefixSeq.Add(1))
		_, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		require.NoError(t, err)
		u := strings.Replace(srv.StoreURL("", smallParts), "s3://"+s3server.Bucket, "s3://"+bucket, 1)
		s, err := storage.Open(context.Background(), u)
		require.NoError(t, err)
		return s
	})
}

// TestMultipartUpload checks that an object over the part size really went
// up in parts (S3's multipart ETag is "<md5 of part md5s>-<parts>") and
// that one under it did not.
func TestMultipartUpload(t *testing.T) {
	srv := s3server.Start(t)
	ctx := context.Background()
	s, err := storage.Open(ctx, srv.StoreURL("mp", smallParts))
	require.NoError(t, err)
	defer s.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), int(s3store.MinPartSize)/16*2+1) // 2 parts + 16 bytes
	require.NoError(t, s.Put(ctx, "big", bytes.NewReader(big), int64(len(big))))
	require.NoError(t, s.PutIfAbsent(ctx, "big-pia", bytes.NewReader(big), -1))
	require.NoError(t, storage.PutBytes(ctx, s, "small", []byte("small")))
	for key, wantParts := range map[string]string{"mp/big": "-3", "mp/big-pia": "-3", "mp/small": ""} {
		head, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s3server.Bucket), Key: aws.String(key)})
		require.NoError(t, err, key)
		etag := strings.Trim(aws.ToString(head.ETag), `"`)
		if wantParts == "" {
			require.NotContains(t, etag, "-", "%s: single PutObject", key)
		} else {
			require.True(t, strings.HasSuffix(etag, wantParts), "%s: ETag %q is not a 3-part multipart ETag", key, etag)
		}
	}
	got, err := storage.ReadAll(ctx, s, "big")
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got))
}

// lossyTransport forwards requests to the real server but, for the first
// conditional PUT, throws the server's answer away and reports a failure,
// so the client sees a 502 although the object was created: a lost
// response.
type lossyTransport struct {
	base         *http.Transport
	dropped      atomic.Bool
	conditionals atomic.Int32
}

func (l *lossyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	conditional := r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*"
	if conditional {
		l.conditionals.Add(1)
	}
	resp, err := l.base.RoundTrip(r)
	if err != nil || !conditional || resp.StatusCode != http.StatusOK || !l.dropped.CompareAndSwap(false, true) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("injected: response lost")
}

// TestPutIfAbsentLostResponse pins down the documented decision: a
// PutIfAbsent whose first attempt created the object but lost the answer
// reports success (not ErrExists), whether the SDK retries (and gets 412)
// or gives up.
func TestPutIfAbsentLostResponse(t *testing.T) {
	srv := s3server.Start(t)
	target, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	for _, tc := range []struct{ attempts, conditionalPuts int }{
		{attempts: 1, conditionalPuts: 1}, // no retry: the HEAD alone settles it
		{attempts: 3, conditionalPuts: 2}, // the retry gets 412, then the HEAD
	} {
		attempts := tc.attempts
		t.Run(fmt.Sprintf("max_attempts=%d", attempts), func(t *testing.T) {
			lossy := &lossyTransport{base: &http.Transport{}}
			defer lossy.base.CloseIdleConnections()
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite: func(pr *httputil.ProxyRequest) {
					pr.SetURL(target)
					pr.Out.Host = pr.In.Host // keep the host the client signed
				},
				Transport: lossy,
				ErrorLog:  log.New(io.Discard, "", 0),
			})
			defer proxy.Close()
			q := url.Values{"endpoint": {proxy.URL}, "region": {s3server.Region}, "path_style": {"true"}, "max_attempts": {fmt.Sprint(attempts)}}
			ctx := context.Background()
			s, err := storage.Open(ctx, fmt.Sprintf("s3://%s/lost%d?%s", s3server.Bucket, attempts, q.Encode()))
			require.NoError(t, err)
			defer s.Close()

			require.NoError(t, storage.PutBytesIfAbsent(ctx, s, "manifest.json", []byte("mine")), "our own lost write is a success")
			require.True(t, lossy.dropped.Load(), "the response was dropped")
			require.EqualValues(t, tc.conditionalPuts, lossy.conditionals.Load(), "conditional PUTs sent")
			got, err := storage.ReadAll(ctx, s, "manifest.json")
			require.NoError(t, err)
			require.Equal(t, "mine", string(got))
			// Someone else's object is still ErrExists.
			require.ErrorIs(t, storage.PutBytesIfAbsent(ctx, s, "manifest.json", []byte("other")), storage.ErrExists)
		})
	}
}

func TestOpenErrors(t *testing.T) {
	srv := s3server.Start(t)
	ctx := context.Background()
	dead := deadEndpoint(t)

	t.Run("missing bucket", func(t *testing.T) {
		u := strings.Replace(srv.URL, "s3://"+s3server.Bucket, "s3://no-such-bucket", 1)
		_, err := storage.Open(ctx, u)
		require.ErrorContains(t, err, `bucket "no-such-bucket" at endpoint `+srv.Endpoint+": bucket does not exist")
	})
	t.Run("wrong credentials", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value")
		_, err := storage.Open(ctx, srv.URL)
		require.ErrorContains(t, err, `bucket "spade-test" at endpoint `+srv.Endpoint+": access denied (HTTP 403): wrong credentials")
		require.NotContains(t, err.Error(), "wrong-secret-value")
		require.NotContains(t, err.Error(), s3server.SecretKey)
	})
	t.Run("no credentials", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		_, err := storage.Open(ctx, srv.URL)
		require.ErrorContains(t, err, "no usable AWS credentials")
		require.ErrorContains(t, err, `bucket "spade-test"`)
	})
	t.Run("unreachable endpoint", func(t *testing.T) {
		start := time.Now()
		_, err := storage.Open(ctx, "s3://spade-test?path_style=true&region=us-east-1&endpoint="+dead)
		require.ErrorContains(t, err, `bucket "spade-test" at endpoint `+dead+": endpoint unreachable")
		require.Less(t, time.Since(start), s3store.ProbeTimeout+5*time.Second, "probe is bounded")
	})
	t.Run("credentials in URL", func(t *testing.T) {
		_, err := storage.Open(ctx, "s3://AKIAXXX:topsecret@spade-test?endpoint="+srv.Endpoint)
		require.ErrorContains(t, err, "credentials in the URL are not accepted")
		require.NotContains(t, err.Error(), "topsecret")
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := storage.Open(cctx, srv.URL)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// deadEndpoint returns an http URL on a loopback port nothing listens on.
func deadEndpoint(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want s3store.Options
		err  string
	}{
		{url: "s3://b", want: s3store.Options{Bucket: "b", PartSize: s3store.DefaultPartSize, MaxAttempts: s3store.DefaultMaxAttempts, ResponseTimeout: s3store.DefaultResponseTimeout}},
		{url: "s3://b/runs/x/?region=eu-west-1&path_style=true&part_size=8388608&max_attempts=2&endpoint=http://127.0.0.1:9000/&response_timeout=2m30s",
			want: s3store.Options{Bucket: "b", Prefix: "runs/x/", Region: "eu-west-1", PathStyle: true, PartSize: 8 << 20, MaxAttempts: 2, Endpoint: "http://127.0.0.1:9000", ResponseTimeout: 150 * time.Second}},
		{url: "s3://", err: "missing bucket"},
		{url: "s3://b?part_size=1024", err: "part_size \"1024\""},
		{url: "s3://b?part_size=abc", err: "part_size"},
		{url: "s3://b?max_attempts=0", err: "max_attempts"},
		{url: "s3://b?response_timeout=0s", err: "response_timeout"},
		{url: "s3://b?response_timeout=-5s", err: "response_timeout"},
		{url: "s3://b?response_timeout=60", err: `response_timeout "60"`},
		{url: "s3://b?path_style=maybe", err: "path_style"},
		{url: "s3://b?endpoint=127.0.0.1:9000", err: "endpoint"},
		{url: "s3://b?endpont=http://x", err: `unknown parameter "endpont"`},
		{url: "s3://b?path_style=true&path_style=false", err: `parameter "path_style" given 2 times`},
		{url: "s3://b?region=us-east-1&region=eu-west-1", err: `parameter "region" given 2 times`},
		{url: "s3://b/a/../c", err: "prefix"},
		{url: "s3://b?aws_secret_access_key=shh", err: "unknown parameter"},
		{url: "file:///x", err: "scheme is not s3"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			require.NoError(t, err)
			got, err := s3store.ParseURL(u)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "shh", "secret-looking values are redacted")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://b", "s3://b/p?endpoint=http://127.0.0.1:1&region=r&path_style=1&part_size=5242880&max_attempts=3&response_timeout=5s",
		"s3://b?part_size=-1", "s3://u:p@b", "s3://b/%2e%2e/x", "s3://b?x=%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		o, err := s3store.ParseURL(u)
		if err != nil {
			return
		}
		if o.Bucket == "" || o.PartSize < s3store.MinPartSize || o.MaxAttempts < 1 || o.ResponseTimeout <= 0 {
			t.Fatalf("ParseURL(%q) accepted bad options %+v", raw, o)
		}
		if o.Prefix != "" && (!strings.HasSuffix(o.Prefix, "/") || storage.ValidateKey(strings.TrimSuffix(o.Prefix, "/")) != nil) {
			t.Fatalf("ParseURL(%q) accepted bad prefix %q", raw, o.Prefix)
		}
	})
}

// TestIncompleteUploads: ListTemp lists the incomplete multipart uploads
// under the store's prefix (what a writer killed mid-Put leaves), with the
// bytes of the parts uploaded so far; DeleteTemp aborts one, reports
// ErrNotFound once it is gone and refuses a key that names no upload.
func TestIncompleteUploads(t *testing.T) {
	srv := s3server.Start(t)
	ctx := context.Background()
	s, err := storage.Open(ctx, srv.StoreURL("tmp", nil))
	require.NoError(t, err)
	defer s.Close()
	tc := s.(storage.TempCollector)
	empty, err := tc.ListTemp(ctx, "")
	require.NoError(t, err)
	require.Empty(t, empty)

	cl := srv.Client()
	bucket := aws.String(s3server.Bucket)
	var ids []string
	for _, key := range []string{"tmp/run/a.parquet", "tmp/run/b.parquet", "elsewhere/c.parquet"} {
		up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bucket, Key: aws.String(key)})
		require.NoError(t, err)
		ids = append(ids, aws.ToString(up.UploadId))
		if key == "tmp/run/a.parquet" {
			for n, body := range []string{"12345", "678"} {
				_, err = cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: bucket, Key: aws.String(key), UploadId: up.UploadId,
					PartNumber: aws.Int32(int32(n + 1)), Body: strings.NewReader(body)})
				require.NoError(t, err)
			}
		}
	}
	got, err := tc.ListTemp(ctx, "run/")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "run/a.parquet?uploadId="+ids[0], got[0].Key)
	require.Equal(t, int64(8), got[0].Size)
	require.Equal(t, "run/b.parquet?uploadId="+ids[1], got[1].Key)
	require.Equal(t, int64(0), got[1].Size)
	require.WithinDuration(t, time.Now(), got[0].ModTime, time.Minute)
	only, err := tc.ListTemp(ctx, "run/b")
	require.NoError(t, err)
	require.Len(t, only, 1)

	require.NoError(t, tc.DeleteTemp(ctx, got[0].Key))
	require.ErrorIs(t, tc.DeleteTemp(ctx, got[0].Key), storage.ErrNotFound)
	for _, bad := range []string{"run/a.parquet", "run/a.parquet?uploadId=", "/run/a.parquet?uploadId=" + ids[0], "run/../a?uploadId=x", "run/a?uploadId=x/y"} {
		require.ErrorIs(t, tc.DeleteTemp(ctx, bad), storage.ErrInvalidKey, bad)
	}
	left, err := tc.ListTemp(ctx, "")
	require.NoError(t, err)
	require.Len(t, left, 1, "the upload outside the prefix is not the store's")
	require.Equal(t, got[1].Key, left[0].Key)
}

// TestStalledServer: a server that accepts connections but stops answering
// (versitygw stopped with SIGSTOP) fails a store call within a bound, after
// the retryer's attempts, with ErrNoAnswer and a message naming the bucket,
// the endpoint and the limit, whether it stalls before the response
// headers, in the middle of a download or in the middle of an upload. Once
// the server is continued, the store works again.
func TestStalledServer(t *testing.T) {
	srv := s3server.Start(t)
	ctx := context.Background()
	const limit = time.Second
	// One attempt can take 2 limits (1 s of Expect: 100-continue, then the
	// stall) and the backoff before the second at most 2 s.
	const bound = 15 * time.Second
	q := url.Values{"response_timeout": {limit.String()}, "max_attempts": {"2"}, "part_size": {fmt.Sprint(64 << 20)}}
	s, err := storage.Open(ctx, srv.StoreURL("stall", q))
	require.NoError(t, err)
	defer s.Close()
	// Larger than what the loopback socket buffers hold, so that a transfer
	// really stalls when the server stops.
	big := bytes.Repeat([]byte("0123456789abcdef"), 32<<20/16)
	require.NoError(t, s.Put(ctx, "big", bytes.NewReader(big), int64(len(big))))
	require.NoError(t, storage.PutBytes(ctx, s, "small", []byte("small")))

	pid := srv.PID() // the versitygw process this test started
	var stopped atomic.Bool
	cont := func() {
		if stopped.CompareAndSwap(true, false) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
		}
	}
	stop := func() {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		stopped.Store(true)
		waitStopped(t, pid)
	}
	t.Cleanup(cont)
	want := fmt.Sprintf("bucket %q at endpoint %s did not answer within %s", s3server.Bucket, srv.Endpoint, limit)
	// call runs f against the stopped server under a context that ends
	// well after the bound, so that a hang fails the test instead of
	// hanging it, and checks the error and the time taken.
	call := func(t *testing.T, f func(ctx context.Context) error) {
		stop()
		defer cont()
		cctx, cancel := context.WithTimeout(ctx, 3*bound)
		defer cancel()
		start := time.Now()
		err := f(cctx)
		took := time.Since(start)
		t.Logf("after %s: %v", took.Round(time.Millisecond), err)
		require.Error(t, err)
		require.Less(t, took, bound, "a stalled server must fail the call within the bound (took %s): %v", took, err)
		require.ErrorIs(t, err, s3store.ErrNoAnswer)
		require.ErrorContains(t, err, want)
	}

	t.Run("no response headers", func(t *testing.T) {
		call(t, func(ctx context.Context) error {
			_, err := storage.ReadAll(ctx, s, "small")
			require.ErrorContains(t, err, "exceeded maximum number of attempts, 2", "the timed-out request was retried")
			return err
		})
	})
	t.Run("download stalls mid-body", func(t *testing.T) {
		// The body is read under this context: a hang fails the test.
		gctx, cancel := context.WithTimeout(ctx, 3*bound)
		defer cancel()
		rc, err := s.Get(gctx, "big")
		require.NoError(t, err)
		defer rc.Close()
		_, err = io.ReadFull(rc, make([]byte, 1<<20))
		require.NoError(t, err)
		call(t, func(context.Context) error {
			_, err := io.Copy(io.Discard, rc)
			return err
		})
	})
	t.Run("upload stalls mid-body", func(t *testing.T) {
		call(t, func(ctx context.Context) error {
			return s.Put(ctx, "big2", bytes.NewReader(big), int64(len(big)))
		})
	})

	// Continued, the server answers again and the store works.
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	got, err := storage.ReadAll(cctx, s, "small")
	require.NoError(t, err)
	require.Equal(t, "small", string(got))
	require.NoError(t, s.Put(cctx, "big2", bytes.NewReader(big), int64(len(big))))
	got, err = storage.ReadAll(cctx, s, "big2")
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got))
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc/PID/task/*/stat): SIGSTOP takes effect asynchronously, and a
// request sent right after kill(2) can still be served.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		require.NoError(t, err)
		all := len(tasks) > 0
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				all = false
				break
			}
		}
		if all {
			return
		}
		require.True(t, time.Now().Before(deadline), "process %d did not stop within 5s", pid)
		time.Sleep(5 * time.Millisecond)
	}
}
