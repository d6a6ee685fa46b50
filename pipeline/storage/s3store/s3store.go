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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"

	"github.com/spade-pipeline/spade/pipeline/storage"
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
