// Package s3store is the s3:// storage backend on aws-sdk-go-v2, for AWS S3
// and S3-compatible servers (MinIO, Ceph RGW, Cloudflare R2, versitygw).
//
// URL:
//
//	s3://BUCKET[/PREFIX]?endpoint=http://127.0.0.1:7070&region=us-east-1
//	    &path_style=true&part_size=16777216&max_attempts=5&response_timeout=60s
//
// Every key K is stored as object PREFIX/K in BUCKET. Query parameters (all
// optional; an unknown or repeated one is an error, to catch typos):
//
//   - endpoint: base URL of an S3-compatible server; default AWS S3.
//   - region: signing region; default from the SDK chain (AWS_REGION,
//     profile), else us-east-1.
//   - path_style: "true" puts the bucket in the path (needed by most
//     self-hosted servers); default false (virtual-hosted style).
//   - part_size: bytes per multipart-upload part and the size above which
//     Put switches to multipart; default 16 MiB, minimum 5 MiB (S3's
//     minimum part size).
//   - max_attempts: attempts per request of the SDK's standard retryer
//     (exponential backoff with jitter); default 5.
//   - response_timeout: a Go duration (e.g. "60s", "2m"), > 0: how long one
//     attempt waits for the server's response headers once the request is
//     sent, and how long a connection may go without moving a byte either
//     way while a request or response is under way; default 60s. See
//     Options.ResponseTimeout.
//
// Credentials come only from the SDK's default chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, shared config/credentials profiles, SSO, IMDS);
// a URL carrying user info is refused and credentials are never logged.
// Request checksums are computed and response checksums validated only
// when an operation requires them, because Ceph, R2 and some MinIO
// versions reject the SDK's default streaming checksum trailers.
//
// Open probes the bucket with HeadBucket (10 s, 2 attempts) so a missing
// bucket, bad credentials or an unreachable endpoint fail at Open with an
// error naming the bucket and endpoint rather than at the first write.
package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/internal/streams"
)

const (
	// DefaultPartSize is the multipart part size and threshold (bytes).
	DefaultPartSize int64 = 16 << 20
	// MinPartSize is S3's minimum multipart part size (bytes).
	MinPartSize int64 = manager.MinUploadPartSize
	// DefaultMaxAttempts is the default number of attempts per request.
	DefaultMaxAttempts = 5
	// ProbeTimeout bounds Open's HeadBucket probe.
	ProbeTimeout = 10 * time.Second
	// probeAttempts keeps an unreachable endpoint from eating the probe's
	// whole budget in backoff.
	probeAttempts = 2
	// DefaultResponseTimeout is the default Options.ResponseTimeout.
	DefaultResponseTimeout = 60 * time.Second
	// putIDMeta is the user-metadata key (x-amz-meta-spade-put-id) holding a
	// random per-call token, by which PutIfAbsent recognises its own object
	// after an ambiguous failure; see PutIfAbsent.
	putIDMeta = "spade-put-id"
)

func init() {
	storage.Register("s3", func(ctx context.Context, u *url.URL) (storage.Store, error) {
		return OpenURL(ctx, u)
	})
}

// Options configures a Store; ParseURL fills it from an s3:// URL.
type Options struct {
	// Bucket is the bucket holding the store (the URL's host).
	Bucket string
	// Prefix is "" or a key prefix ending in "/".
	Prefix string
	// Endpoint is the base URL of an S3-compatible server; "" means AWS.
	Endpoint string
	// Region is the signing region; "" means the SDK chain's, else
	// us-east-1.
	Region string
	// PathStyle puts the bucket in the URL path instead of the host name
	// (needed by most self-hosted servers); default false.
	PathStyle bool
	// PartSize is the multipart part size and threshold in bytes.
	PartSize int64
	// MaxAttempts is the standard retryer's attempts per request.
	MaxAttempts int
	// ResponseTimeout bounds how long a server may stay silent: one attempt
	// of a request fails when the response headers have not arrived this
	// long after the request was sent, and any read or write on a
	// connection fails when it moves no byte for this long (a download or
	// upload that stalls mid-transfer). It is not a limit on a whole
	// request, so large parts may take as long as they need while bytes
	// flow. A timed-out attempt is retried like other transient errors (up
	// to MaxAttempts; a stalled GET body is resumed with a ranged GET);
	// once they are spent the error wraps ErrNoAnswer. 0 means
	// DefaultResponseTimeout.
	ResponseTimeout time.Duration
}

// ErrNoAnswer is wrapped by the errors of store calls whose last attempt
// failed because the server did not answer within Options.ResponseTimeout
// (a stopped process, a hung gateway); the message names the bucket, the
// endpoint and the limit.
var ErrNoAnswer = errors.New("no answer from the S3 server")

// ParseURL reads an s3:// URL into Options (see the package doc). Errors
// name the URL (redacted) and the bad parameter.
func ParseURL(u *url.URL) (Options, error) {
	raw := storage.Redact(u.String())
	bad := func(format string, a ...any) (Options, error) {
		return Options{}, storage.BadURL(fmt.Errorf("s3 store URL %s: %s", raw, fmt.Sprintf(format, a...)))
	}
	if u.Scheme != "s3" {
		return bad("scheme is not s3")
	}
	if u.User != nil {
		return bad("credentials in the URL are not accepted; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or an AWS profile")
	}
	if u.Host == "" {
		return bad("missing bucket (want s3://BUCKET[/PREFIX])")
	}
	o := Options{Bucket: u.Host, PartSize: DefaultPartSize, MaxAttempts: DefaultMaxAttempts, ResponseTimeout: DefaultResponseTimeout}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if err := storage.ValidateKey(p); err != nil {
			return bad("prefix: %v", err)
		}
		o.Prefix = p + "/"
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the first bad parameter deterministically
	for _, k := range keys {
		if n := len(q[k]); n > 1 {
			// url.Values.Get would silently use the first: a URL with
			// region= appended to one that has it would sign for the old
			// region.
			return bad("parameter %q given %d times; give it once", k, n)
		}
		v := q.Get(k)
		switch k {
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return bad("endpoint %q: want http(s)://host[:port]", v)
			}
			o.Endpoint = strings.TrimSuffix(v, "/")
		case "region":
			o.Region = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("path_style %q: want true or false", v)
			}
			o.PathStyle = b
		case "part_size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < MinPartSize {
				return bad("part_size %q: want an integer number of bytes >= %d", v, MinPartSize)
			}
			o.PartSize = n
		case "max_attempts":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return bad("max_attempts %q: want an integer >= 1", v)
			}
			o.MaxAttempts = n
		case "response_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("response_timeout %q: want a duration > 0 such as 60s or 2m", v)
			}
			o.ResponseTimeout = d
		default:
			return bad("unknown parameter %q (known: endpoint, region, path_style, part_size, max_attempts, response_timeout)", k)
		}
	}
	return o, nil
}

// Store is an s3:// store. Methods are safe for concurrent use.
type Store struct {
	client    *s3.Client
	uploader  *manager.Uploader //nolint:staticcheck // SA1019: transfermanager is newer; manager is still maintained and what Ceph/R2/MinIO users run today
	transport *http.Transport
	opts      Options
	url       string
	where     string // "bucket B at endpoint E", for errors
}

var _ storage.Store = (*Store)(nil)
var _ storage.TempCollector = (*Store)(nil)

// OpenURL parses u and opens the store; see New for the errors.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	o, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, o)
	if err != nil {
		return nil, err
	}
	s.url = storage.Redact(u.String())
	return s, nil
}

// sdkLogger sends the AWS SDK's own log lines (e.g. "falling back to
// IMDSv1" while it looks for credentials) through slog.Default, as debug
// records with source=aws-sdk, instead of the SDK's plain "SDK <date> WARN"
// lines on stderr, which broke --log-format json. Failures reach the
// caller as errors anyway; spade --log-level debug shows these lines.
type sdkLogger struct{}

// Logf implements logging.Logger.
func (sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	slog.Debug(fmt.Sprintf(format, v...), "source", "aws-sdk", "sdk_level", string(c))
}

// New builds the client and probes the bucket with HeadBucket. Errors name
// the bucket and endpoint and say which of these it is: no credentials,
// unreachable endpoint (or no answer within ProbeTimeout), bucket not
// found, access denied (wrong credentials or no permission), or any other
// status; a cancelled ctx gives ctx.Err() wrapped.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.ResponseTimeout <= 0 {
		o.ResponseTimeout = DefaultResponseTimeout
	}
	endpoint := o.Endpoint
	if endpoint == "" {
		endpoint = "AWS S3"
	}
	where := fmt.Sprintf("bucket %q at endpoint %s", o.Bucket, endpoint)

	loadOpts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) { so.MaxAttempts = o.MaxAttempts })
		}),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		config.WithLogger(sdkLogger{}),
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("open s3 %s: load AWS config: %w", where, err)
	}
	// Own the transport so Close can drop its idle connections. Take it from
	// the SDK's client so settings the config applied (AWS_CA_BUNDLE's root
	// CAs) are kept; like the SDK's client, do not follow redirects (S3
	// answers a wrong region with 301, which must surface, not be chased).
	bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		bc = awshttp.NewBuildableClient()
	}
	tr := bc.GetTransport()
	// A server that accepts a connection and then says nothing (a stopped
	// process, a hung gateway) would otherwise hold a request, and the
	// lease renewal behind it, forever. No whole-request timeout: a large
	// part may take minutes while its bytes flow.
	tr.ResponseHeaderTimeout = o.ResponseTimeout
	// The SDK's transport dials with DialContext and layers TLS on top, so
	// the idle limit covers https connections too.
	tr.DialContext = idleTimeoutDialer(tr.DialContext, o.ResponseTimeout)
	cfg.HTTPClient = &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		so.UsePathStyle = o.PathStyle
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
	s := &Store{
		client:    client,
		transport: tr,
		opts:      o,
		where:     where,
		url:       fmt.Sprintf("s3://%s/%s", o.Bucket, o.Prefix),
		uploader: manager.NewUploader(client, func(u *manager.Uploader) { //nolint:staticcheck // SA1019: see Store.uploader
			u.PartSize = o.PartSize
		}),
	}
	if err := s.probe(ctx, cfg); err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return s, nil
}

func (s *Store) probe(ctx context.Context, cfg aws.Config) error {
	pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(pctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("open s3 %s: %w", s.where, ctx.Err())
		}
		return fmt.Errorf("open s3 %s: no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): %w", s.where, err)
	}
	_, err := s.client.HeadBucket(pctx, &s3.HeadBucketInput{Bucket: aws.String(s.opts.Bucket)},
		func(so *s3.Options) { so.RetryMaxAttempts = probeAttempts })
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("open s3 %s: %w", s.where, ctx.Err())
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.HTTPStatusCode() == 0 {
		// No HTTP answer at all: refused, DNS, TLS, timeout.
		if pctx.Err() != nil {
			return fmt.Errorf("open s3 %s: endpoint unreachable: no answer to HeadBucket within %s: %w", s.where, ProbeTimeout, err)
		}
		return fmt.Errorf("open s3 %s: endpoint unreachable: %w", s.where, err)
	}
	switch code := re.HTTPStatusCode(); code {
	case http.StatusNotFound:
		return fmt.Errorf("open s3 %s: bucket does not exist (HTTP 404)", s.where)
	case http.StatusForbidden:
		return fmt.Errorf("open s3 %s: access denied (HTTP 403): wrong credentials or no permission on the bucket", s.where)
	case http.StatusMovedPermanently:
		return fmt.Errorf("open s3 %s: bucket is in another region than %q (HTTP 301); set region= in the URL", s.where, s.client.Options().Region)
	default:
		return fmt.Errorf("open s3 %s: HeadBucket failed with HTTP %d: %w", s.where, code, err)
	}
}

// idleTimeoutDialer wraps dial (nil: a plain net.Dialer) so that every
// connection it makes fails a read or write that moves no byte for idle;
// see idleConn.
func idleTimeoutDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), idle time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c, idle: idle}, nil
	}
}

// idleConn is a connection whose every Read and Write first pushes the
// deadline of both directions to idle from now. A call blocked on a
// silent peer fails after idle with a timeout (os.ErrDeadlineExceeded),
// which the SDK retries, and which resumingBody resumes. Progress in one
// direction extends the other's deadline too, so the transport's read
// loop, waiting for a response while a large body is still being sent,
// does not time out as long as the upload moves. A connection idle in the
// pool fails its pending read after idle and is dropped, as
// IdleConnTimeout would.
//
// Both directions time out together, and the transport closes the
// connection on the first error it sees, so the other direction then
// fails with "use of closed network connection": once a deadline has
// passed, every error of the connection is reported as an idleTimeout.
type idleConn struct {
	net.Conn
	idle    time.Duration
	expired atomic.Bool
}

func (c *idleConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, c.check(err)
	}
	n, err := c.Conn.Read(p)
	return n, c.check(err)
}

func (c *idleConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, c.check(err)
	}
	n, err := c.Conn.Write(p)
	return n, c.check(err)
}

// check returns err as an idleTimeout when it is a deadline passing, or
// any error after one passed; other errors (and nil) as they are.
func (c *idleConn) check(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.expired.Store(true)
	}
	if !c.expired.Load() {
		return err
	}
	return &idleTimeout{idle: c.idle, err: err}
}

// idleTimeout is the error of a connection on which no byte moved for
// idle. It is a timeout (and temporary) for the SDK's retryer and for
// silent.
type idleTimeout struct {
	idle time.Duration
	err  error
}

func (e *idleTimeout) Error() string {
	return fmt.Sprintf("no byte moved on the connection for %s: %v", e.idle, e.err)
}
func (e *idleTimeout) Unwrap() error   { return e.err }
func (e *idleTimeout) Timeout() bool   { return true }
func (e *idleTimeout) Temporary() bool { return true }

// noAnswer returns err, from a call under ctx, wrapped with ErrNoAnswer
// and a message naming the bucket, endpoint and limit when err comes from
// a server that stayed silent past ResponseTimeout (a transport or
// connection timeout, not ctx ending); any other err is returned as it is.
func (s *Store) noAnswer(ctx context.Context, err error) error {
	if !silent(ctx, err) {
		return err
	}
	return fmt.Errorf("%w: %s did not answer within %s (response_timeout; max_attempts %d): %w", ErrNoAnswer, s.where, s.opts.ResponseTimeout, s.opts.MaxAttempts, err)
}

// silent reports whether err, from a call under ctx, is a timeout of the
// transport or of a connection (a server that stayed silent), not ctx
// ending, not a connect that timed out, and not already wrapped by
// noAnswer. (net/http's "timeout
// awaiting response headers" matches context.DeadlineExceeded with
// errors.Is, so ctx itself is what tells the two apart.)
func silent(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrNoAnswer) || errors.Is(err, context.Canceled) {
		return false
	}
	// A connect that timed out is an unreachable endpoint, bounded by the
	// dialer, not by response_timeout: its own error says so.
	if oe := (*net.OpError)(nil); errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func (s *Store) objectKey(key string) string { return s.opts.Prefix + key }

func (s *Store) begin(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	if err := storage.ValidateKey(key); err != nil {
		return fmt.Errorf("%s in %s: %w", op, s.url, err)
	}
	return nil
}

func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isNotFound: a 404 that is about the key, not the bucket.
func isNotFound(err error) bool {
	return status(err) == http.StatusNotFound && apiCode(err) != "NoSuchBucket"
}

// fail wraps err, from a call under ctx, once, mapping a missing key to
// storage.ErrNotFound and a silent server to ErrNoAnswer (noAnswer).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, storage.ErrNotFound)
	}
	return fmt.Errorf("%s %s in %s: %w", op, key, s.url, s.noAnswer(ctx, err))
}

// Get returns the whole object; see storage.Store. The body resumes a
// broken transfer with ranged GETs (resuming). Errors, naming the key and
// the store's URL: ctx's, storage.ErrInvalidKey, storage.ErrNotFound
// (wrapped) for a missing key, else GetObject's.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.begin(ctx, "get", key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key))})
	if err != nil {
		return nil, s.fail(ctx, "get", key, err)
	}
	return streams.ReadCloserWithContext(ctx, s.resuming(ctx, key, out, 0)), nil
}

// GetRange returns length bytes from offset with one ranged GET (RFC 9110
// Range: bytes=first-last); see storage.Store for the edge cases. A
// zero-length range costs a HEAD, since HTTP cannot express it. Errors,
// naming the key and the store's URL: ctx's, storage.ErrInvalidKey, a
// negative offset or length, storage.ErrNotFound (wrapped), else
// GetObject's; a range past the end (416) is an empty body, not an error.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := s.begin(ctx, "get range", key); err != nil {
		return nil, err
	}
	if offset < 0 || length < 0 {
		return nil, fmt.Errorf("get range %s in %s: negative offset %d or length %d", key, s.url, offset, length)
	}
	if length == 0 {
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	last := offset + length - 1
	if last < offset { // overflow: read to the end
		last = 1<<63 - 1
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key)),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", offset, last)),
	})
	if err != nil {
		// 416 means the object exists but the range starts at or past its
		// end (including any range on an empty object).
		if status(err) == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, s.fail(ctx, "get range", key, err)
	}
	return streams.ReadCloserWithContext(ctx, s.resuming(ctx, key, out, offset)), nil
}

// resuming wraps a GetObject body that starts at byte offset of the
// object so that a body broken off mid-transfer (connection reset, closed
// early) is resumed with a ranged GET from the first missing byte, up to
// MaxAttempts times. The SDK's retryer covers requests, not the reading of
// a response body, so without this one dropped connection fails the whole
// read. If-Match pins the ETag: a replaced object is never spliced onto
// the old one's prefix (the resume then fails with 412). Bodies without a
// known length or ETag are returned as they are.
func (s *Store) resuming(ctx context.Context, key string, out *s3.GetObjectOutput, offset int64) io.ReadCloser {
	if out.ContentLength == nil || out.ETag == nil || *out.ContentLength <= 0 {
		return out.Body
	}
	return &resumingBody{ctx: ctx, s: s, key: key, etag: *out.ETag, body: out.Body, next: offset, end: offset + *out.ContentLength}
}

type resumingBody struct {
	ctx     context.Context
	s       *Store
	key     string
	etag    string
	body    io.ReadCloser
	next    int64 // object offset of the next byte to read
	end     int64 // object offset one past the last byte wanted
	resumes int
}

func (b *resumingBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.next += int64(n)
	if err == nil || (errors.Is(err, io.EOF) && b.next >= b.end) {
		return n, err
	}
	if b.next >= b.end || b.ctx.Err() != nil || b.resumes+1 >= b.s.opts.MaxAttempts {
		if silent(b.ctx, err) {
			err = fmt.Errorf("get %s in %s: body stalled at byte %d: %w", b.key, b.s.url, b.next, b.s.noAnswer(b.ctx, err))
		}
		return n, err
	}
	b.resumes++
	_ = b.body.Close()
	out, gerr := b.s.client.GetObject(b.ctx, &s3.GetObjectInput{
		Bucket: &b.s.opts.Bucket, Key: aws.String(b.s.objectKey(b.key)),
		Range:   aws.String(fmt.Sprintf("bytes=%d-%d", b.next, b.end-1)),
		IfMatch: aws.String(b.etag),
	})
	if gerr != nil {
		b.body = io.NopCloser(bytes.NewReader(nil))
		b.end = b.next // no further resumes
		return n, fmt.Errorf("get %s in %s: body broke off at byte %d (%w) and resuming failed: %w", b.key, b.s.url, b.next, err, b.s.noAnswer(b.ctx, gerr))
	}
	b.body = out.Body
	if n > 0 {
		return n, nil
	}
	return b.Read(p)
}

func (b *resumingBody) Close() error { return b.body.Close() }

// Put uploads the object: a single PutObject when size is known and at
// most the part size, else a multipart upload through the SDK's upload
// manager (aborted on failure or cancellation, so no partial object is
// ever visible); see storage.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.begin(ctx, "put", key); err != nil {
		return err
	}
	if err := s.upload(ctx, key, r, size, nil); err != nil {
		return s.fail(ctx, "put", key, err)
	}
	return nil
}

// PutIfAbsent uploads with If-None-Match: * (a conditional PutObject, or a
// conditional CompleteMultipartUpload for large objects), so the server
// decides the race: exactly one writer succeeds and the others get 412
// Precondition Failed, returned as storage.ErrExists.
//
// Retries: the SDK retries a request whose response was lost (timeout,
// reset, 5xx). If the lost attempt had in fact created the object, the
// retry gets 412 although this call won. To report that correctly, every
// PutIfAbsent tags its object with a random token in user metadata
// (x-amz-meta-spade-put-id); after any failure other than cancellation it
// HEADs the key and returns nil when the stored object carries its own
// token. So a 412 means ErrExists only when someone else's object is there.
// A 409 ConditionalRequestConflict (a concurrent conditional write still in
// flight on AWS) is ErrExists if the key now holds another writer's object,
// and otherwise an error the caller may retry.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.begin(ctx, "put if absent", key); err != nil {
		return err
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return fmt.Errorf("put if absent %s in %s: make put token: %w", key, s.url, err)
	}
	token := hex.EncodeToString(tok[:])
	err := s.upload(ctx, key, r, size, &token)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("put if absent %s in %s: %w", key, s.url, ctx.Err())
	}
	head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key))})
	if herr == nil && head.Metadata[putIDMeta] == token {
		return nil // an earlier attempt of this call created it
	}
	code, st := apiCode(err), status(err)
	switch {
	case st == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return fmt.Errorf("put if absent %s in %s: %w", key, s.url, storage.ErrExists)
	case st == http.StatusConflict || code == "ConditionalRequestConflict":
		if herr == nil {
			return fmt.Errorf("put if absent %s in %s: %w", key, s.url, storage.ErrExists)
		}
		return fmt.Errorf("put if absent %s in %s: conflicting concurrent write, object still absent (retry): %w", key, s.url, s.noAnswer(ctx, err))
	}
	return fmt.Errorf("put if absent %s in %s: %w", key, s.url, s.noAnswer(ctx, err))
}

// upload sends the body; token != nil makes it conditional (If-None-Match)
// and tags the object with the token.
func (s *Store) upload(ctx context.Context, key string, r io.Reader, size int64, token *string) error {
	body := streams.Sized(streams.WithContext(ctx, r), size)
	in := &s3.PutObjectInput{
		Bucket:      &s.opts.Bucket,
		Key:         aws.String(s.objectKey(key)),
		ContentType: aws.String("application/octet-stream"),
	}
	if token != nil {
		in.IfNoneMatch = aws.String("*")
		in.Metadata = map[string]string{putIDMeta: *token}
	}
	if size >= 0 && size <= s.opts.PartSize {
		// Small objects, the common case (manifests, shards): buffer exactly
		// once so the SDK can sign the payload and replay it on retries,
		// instead of the upload manager's part-size buffer.
		buf := make([]byte, size)
		if _, err := io.ReadFull(body, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("read body: %w: declared %d bytes, got fewer", streams.ErrSizeMismatch, size)
			}
			return fmt.Errorf("read body: %w", err)
		}
		// The body must end here; one more byte means the size was wrong.
		if n, err := io.ReadFull(body, make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
			if err == nil {
				err = fmt.Errorf("%w: declared %d bytes, got more", streams.ErrSizeMismatch, size)
			}
			return fmt.Errorf("read body: %w", err)
		}
		in.Body = bytes.NewReader(buf)
		in.ContentLength = aws.Int64(size)
		_, err := s.client.PutObject(ctx, in)
		return err
	}
	in.Body = body
	_, err := s.uploader.Upload(ctx, in) //nolint:staticcheck // SA1019: see Store.uploader
	return err
}

// Stat returns the object's Info from a HEAD (Size in bytes, ModTime in
// UTC); see storage.Store. Errors, naming the key and the store's URL:
// ctx's, storage.ErrInvalidKey, storage.ErrNotFound (wrapped), else
// HeadObject's.
func (s *Store) Stat(ctx context.Context, key string) (storage.Info, error) {
	if err := s.begin(ctx, "stat", key); err != nil {
		return storage.Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key))})
	if err != nil {
		return storage.Info{}, s.fail(ctx, "stat", key, err)
	}
	info := storage.Info{Key: key, Size: aws.ToInt64(out.ContentLength)}
	if out.LastModified != nil {
		info.ModTime = out.LastModified.UTC()
	}
	return info, nil
}

// storeKey returns the store key of a full object key: the key relative
// to the store's prefix, when it is under the prefix and valid (other
// tools' "dir/" markers are not).
func (s *Store) storeKey(full string) (string, bool) {
	key, ok := strings.CutPrefix(full, s.opts.Prefix)
	return key, ok && storage.ValidateKey(key) == nil
}

// List pages through ListObjectsV2 (1000 keys a page) and returns the
// objects under prefix, sorted by key. Keys that break the key rules (e.g.
// "dir/" markers made by other tools) are skipped. Errors: ctx's and
// ListObjectsV2's, wrapped with the prefix and the store's URL.
func (s *Store) List(ctx context.Context, prefix string) ([]storage.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %q in %s: %w", prefix, s.url, err)
	}
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: &s.opts.Bucket,
		Prefix: aws.String(s.opts.Prefix + prefix),
	})
	out := []storage.Info{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %q in %s: %w", prefix, s.url, s.noAnswer(ctx, err))
		}
		for _, o := range page.Contents {
			key, ok := s.storeKey(aws.ToString(o.Key))
			if !ok {
				continue
			}
			info := storage.Info{Key: key, Size: aws.ToInt64(o.Size)}
			if o.LastModified != nil {
				info.ModTime = o.LastModified.UTC()
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// uploadParam separates an object key from its multipart upload id in the
// temp keys ListTemp returns: "KEY?uploadId=ID", as in S3's REST paths.
const uploadParam = "?uploadId="

// ListTemp returns the incomplete multipart uploads (storage.TempCollector)
// whose key relative to the store's prefix starts with prefix, sorted by
// Key (the joined "KEY?uploadId=ID" string). A Put of more than part_size bytes whose writer was
// killed leaves one behind: its parts are stored (and billed) but no key
// names them, and S3 never expires them without a bucket lifecycle rule.
// Each Info's Key is "KEY?uploadId=ID" (KEY a valid storage key), Size the
// total size in bytes of the parts uploaded so far (ListParts), and
// ModTime the upload's initiation time in UTC. Uploads under keys that
// break the key rules (made by other tools) are skipped. Errors: ctx's and
// those of ListMultipartUploads and ListParts, wrapped with the prefix and
// the store's URL; an upload that completes or is aborted while it is
// being listed is left out.
func (s *Store) ListTemp(ctx context.Context, prefix string) ([]storage.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list temp %q in %s: %w", prefix, s.url, err)
	}
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{
		Bucket: &s.opts.Bucket,
		Prefix: aws.String(s.opts.Prefix + prefix),
	})
	out := []storage.Info{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list temp %q in %s: %w", prefix, s.url, s.noAnswer(ctx, err))
		}
		for _, u := range page.Uploads {
			full, id := aws.ToString(u.Key), aws.ToString(u.UploadId)
			key, ok := s.storeKey(full)
			if !ok || id == "" {
				continue
			}
			size, err := s.uploadedBytes(ctx, full, id)
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list temp %q in %s: parts of %s: %w", prefix, s.url, key, s.noAnswer(ctx, err))
			}
			info := storage.Info{Key: key + uploadParam + id, Size: size}
			if u.Initiated != nil {
				info.ModTime = u.Initiated.UTC()
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// uploadedBytes sums the sizes (bytes) of the parts of one multipart
// upload; object is the full object key. A 404 (NoSuchUpload) is returned
// as is.
func (s *Store) uploadedBytes(ctx context.Context, object, id string) (int64, error) {
	p := s3.NewListPartsPaginator(s.client, &s3.ListPartsInput{Bucket: &s.opts.Bucket, Key: &object, UploadId: &id})
	var n int64
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, part := range page.Parts {
			n += aws.ToInt64(part.Size)
		}
	}
	return n, nil
}

// DeleteTemp aborts one incomplete multipart upload that ListTemp returned
// (storage.TempCollector), which deletes its parts. A key that is not
// "KEY?uploadId=ID" with a valid KEY and an ID without "/" is refused (storage.ErrInvalidKey);
// an upload that no longer exists (completed or aborted meanwhile) gives
// storage.ErrNotFound, wrapped. Other errors are AbortMultipartUpload's
// and ctx's, wrapped with the key and the store's URL.
func (s *Store) DeleteTemp(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete temp %s in %s: %w", key, s.url, err)
	}
	i := strings.LastIndex(key, uploadParam)
	if i < 0 {
		i = len(key)
	}
	object, id := key[:i], strings.TrimPrefix(key[i:], uploadParam)
	if id == "" || strings.Contains(id, "/") || storage.ValidateKey(object) != nil {
		return fmt.Errorf("delete temp in %s: %w: %q is not an incomplete multipart upload", s.url, storage.ErrInvalidKey, key)
	}
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(object)), UploadId: &id,
	})
	if err != nil {
		return s.fail(ctx, "delete temp", key, err)
	}
	return nil
}

// Delete removes the object. S3's DeleteObject succeeds on a missing key,
// so a HEAD first supplies the contract's ErrNotFound; the pair is not
// atomic, and a concurrent Delete of the same key may both succeed.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, "delete", key); err != nil {
		return err
	}
	k := aws.String(s.objectKey(key))
	if _, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: k}); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.opts.Bucket, Key: k}); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// URL returns the store's URL with credentials and secret-looking
// parameters removed.
func (s *Store) URL() string { return s.url }

// Client returns the underlying S3 client, for tools and tests that need
// an operation the Store interface does not offer.
func (s *Store) Client() *s3.Client { return s.client }

// Options returns the options the store was opened with.
func (s *Store) Options() Options { return s.opts }

// Close closes idle HTTP connections; the store must not be used after.
// It never fails and returns nil.
func (s *Store) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}
