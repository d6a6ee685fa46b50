package s3server_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartServesAndCleansUp(t *testing.T) {
	var pid int
	t.Run("running", func(t *testing.T) {
		srv := s3server.Start(t)
		pid = srv.PID()
		require.True(t, strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:"), srv.Endpoint)
		u, err := url.Parse(srv.URL)
		require.NoError(t, err)
		require.Equal(t, "s3", u.Scheme)
		require.Equal(t, s3server.Bucket, u.Host)
		require.Empty(t, u.Path)
		require.Equal(t, url.Values{"endpoint": {srv.Endpoint}, "path_style": {"true"}, "region": {s3server.Region}}, u.Query())
		require.Equal(t, s3server.AccessKey, os.Getenv("AWS_ACCESS_KEY_ID"))
		require.Equal(t, s3server.SecretKey, os.Getenv("AWS_SECRET_ACCESS_KEY"))

		ctx := context.Background()
		c := srv.Client()
		_, err = c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s3server.Bucket)})
		require.NoError(t, err, "bucket created")
		_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3server.Bucket), Key: aws.String("a/b"), Body: strings.NewReader("hi")})
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(srv.Root, s3server.Bucket, "a", "b"))
		require.NoError(t, err, "posix backend rooted in Root")
		require.Equal(t, "hi", string(b))
	})
	require.NotZero(t, pid)
	err := syscall.Kill(pid, 0)
	require.True(t, errors.Is(err, syscall.ESRCH), "server process %d still exists after cleanup (kill: %v)", pid, err)
}

func TestBinaryCached(t *testing.T) {
	p := s3server.Binary(t)
	require.True(t, strings.HasSuffix(p, filepath.Join(".cache", "bin", "versitygw-"+s3server.Version)), p)
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.NotZero(t, st.Mode()&0o111, "executable")
}
