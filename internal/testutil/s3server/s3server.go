// Package s3server starts a real S3-compatible server for tests: versitygw
// (github.com/versity/versitygw, pinned in tools/go.mod) with its posix
// backend rooted in a test temp directory.
//
// The binary is built once per machine into <repo>/.cache/bin (git-ignored)
// with `go build -C tools`, under an flock so that the parallel test
// binaries `go test` starts do not build it twice. Nothing is skipped: if
// the build fails, the test fails with the build output.
package s3server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Version is the versitygw release the tests run; it must match tools/go.mod.
const Version = "v1.8.0"

const (
	// AccessKey is the fixed root access key the server accepts (a
	// test-only value, not a secret).
	AccessKey = "spadetestaccess"
	// SecretKey is the fixed root secret key the server accepts (a
	// test-only value, not a secret).
	SecretKey = "spadetestsecret0123456789"
	// Region is the region the server reports and the store URL names.
	Region = "us-east-1"
	// Bucket is the bucket Start creates.
	Bucket = "spade-test"

	startTimeout = 60 * time.Second
)

// Server is one running versitygw process.
type Server struct {
	// Endpoint is the server's base URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// URL is the s3:// store URL for Bucket on this server, with endpoint,
	// region and path-style addressing set and no prefix.
	URL string
	// Root is the posix backend's directory; Root/<bucket>/<key> is an
	// object's file.
	Root string

	bin    string
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's result once
	out    *syncBuffer
}

// StoreURL returns the s3:// store URL for prefix in Bucket with extra
// query parameters (e.g. part_size) added to the endpoint ones.
func (s *Server) StoreURL(prefix string, extra url.Values) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint)
	q.Set("region", Region)
	q.Set("path_style", "true")
	for k, vs := range extra {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	u := url.URL{Scheme: "s3", Host: Bucket, Path: "/" + strings.Trim(prefix, "/"), RawQuery: q.Encode()}
	if prefix == "" {
		u.Path = ""
	}
	return u.String()
}

// Client returns a raw S3 client for the server, for tests that inspect
// what a store wrote (ETags, metadata) beneath the Store interface.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// PID returns the server process's id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Output returns what the server has written to stdout and stderr so far.
func (s *Server) Output() string { return s.out.String() }

// Start builds versitygw if needed, starts it on a free loopback port with
// a fresh posix root in t.TempDir(), waits until it answers, creates
// Bucket, and points the AWS SDK's default credential chain at the test
// credentials with t.Setenv (so Start cannot be used by parallel tests).
// Cleanup kills the server's whole process group. Any failure is fatal.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	root := t.TempDir()

	srv, err := startRetrying(bin, root)
	if err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(func() { srv.stop() })

	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_PROFILE", "")
	// Keep the developer's own AWS profile and IMDS out of the tests.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "aws-config-absent"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "aws-credentials-absent"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := srv.Client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(Bucket)}); err != nil {
		t.Fatalf("create bucket %s on versitygw %s: %v\nserver output:\n%s", Bucket, srv.Endpoint, err, srv.Output())
	}
	return srv
}

// Restart kills the server (SIGKILL: no graceful shutdown) and starts a new
// one on the same posix root, so buckets, objects and in-progress multipart
// uploads survive, on a new port: Endpoint and URL change. For tests of a
// server that dies mid-request. Not safe for concurrent use with the
// Server's other methods. Errors: the new server does not start.
func (s *Server) Restart() error {
	s.stop()
	next, err := startRetrying(s.bin, s.Root)
	if err != nil {
		return err
	}
	*s = *next
	return nil
}

// startRetrying starts the server on root, trying up to three free ports:
// a freshly released port can be taken by someone else before the server
// binds it; the server then exits and we try another.
func startRetrying(bin, root string) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		srv, err := start(bin, root)
		if err == nil {
			return srv, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(bin, root string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	out := &syncBuffer{}
	cmd := exec.Command(bin,
		"--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "--port", addr, "--quiet",
		"posix", root)
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group, so cleanup can kill anything the server spawns.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s := &Server{Endpoint: "http://" + addr, Root: root, bin: bin, cmd: cmd, exited: exited, out: out}
	s.URL = s.StoreURL("", nil)

	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("versitygw on %s exited before answering (%w); output:\n%s", addr, err, out.String())
		default:
		}
		// Any HTTP answer (an unsigned request gets 403) means it serves.
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = waitExit(exited)
			return nil, fmt.Errorf("versitygw on %s did not answer within %s: %w; output:\n%s", addr, startTimeout, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the server's process group and waits until it is reaped, so
// the goroutine waiting on it has ended before goleak looks.
func (s *Server) stop() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = waitExit(s.exited)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

var (
	buildMu   sync.Mutex
	builtPath string
)

// Binary returns the path of the versitygw binary, building it first if the
// cache does not have it. A build failure fails t with the build output.
func Binary(t testing.TB) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtPath != "" {
		return builtPath
	}
	p, err := build()
	if err != nil {
		t.Fatalf("build versitygw %s: %v", Version, err)
	}
	builtPath = p
	return p
}

// build runs `go build -C tools` into the cache unless the binary is
// already there. An exclusive flock on a sibling lock file serialises
// builds across processes; the binary is written under a temp name and
// renamed, so no process ever runs a half-written file.
func build() (string, error) {
	repo, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(repo, ".cache", "bin")
	bin := filepath.Join(dir, "versitygw-"+Version)
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	if isExecutable(bin) {                               // another process built it while we waited
		return bin, nil
	}
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	cmd := exec.Command(goTool(), "build", "-C", filepath.Join(repo, "tools"), "-o", tmp, "github.com/versity/versitygw/cmd/versitygw")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build -C tools: %w\n%s", err, out.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// goTool finds the go command: the one on PATH, else the standard install
// location of the official Go distribution.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// repoRoot walks up from the working directory (a test's package
// directory) to the directory holding both go.mod and tools/go.mod.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isFile(filepath.Join(d, "go.mod")) && isFile(filepath.Join(d, "tools", "go.mod")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no directory above %s holds go.mod and tools/go.mod", wd)
		}
	}
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// syncBuffer collects the server's output from its two pipes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitExit waits for the server process to be reaped and returns its wait
// status (an error after the SIGKILL the callers send on purpose).
func waitExit(exited <-chan error) error { return <-exited }
