package backends_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSchemes(t *testing.T) {
	require.Equal(t, []string{"file", "mem", "s3"}, storage.Schemes())
}

func TestUnknownScheme(t *testing.T) {
	_, err := storage.Open(context.Background(), "gs://user:hunter2@bucket/runs?token=abc")
	require.ErrorIs(t, err, storage.ErrUnknownScheme)
	require.ErrorContains(t, err, `unknown store URL scheme "gs" (known: file, mem, s3)`)
	require.NotContains(t, err.Error(), "hunter2")
	require.NotContains(t, err.Error(), "abc")
}

func TestOpenEachScheme(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"mem://backends-test", "file://" + t.TempDir()} {
		s, err := storage.Open(ctx, u)
		require.NoError(t, err, u)
		require.NoError(t, storage.PutBytes(ctx, s, "k", []byte("v")))
		require.NoError(t, s.Close())
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	require.Panics(t, func() { storage.Register("mem", nil) })
}
