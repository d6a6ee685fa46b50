package backends_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
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

// TestOpenEachScheme opens a store per scheme through storage.Open (the
// registry this package fills) and checks that the URL reached the right
// backend: the file:// store keeps its objects as files under the URL's
// directory, and mem:// stores opened with the same name share one
// namespace (a PREFIX path puts keys under PREFIX/ in it), while another
// name sees nothing. S3 is opened against versitygw in the s3store tests.
func TestOpenEachScheme(t *testing.T) {
	ctx := context.Background()
	data := []byte("object bytes\x00\xff")

	t.Run("file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "store")
		s, err := storage.Open(ctx, "file://"+dir)
		require.NoError(t, err)
		fs, ok := s.(*filestore.Store)
		require.True(t, ok, "file:// opened a %T", s)
		require.Equal(t, dir, fs.Root())
		require.NoError(t, storage.PutBytes(ctx, s, "run/round=000001/k.bin", data))
		got, err := storage.ReadAll(ctx, s, "run/round=000001/k.bin")
		require.NoError(t, err)
		require.Equal(t, data, got)
		// The object is a plain file at ROOT/<key>.
		onDisk, err := os.ReadFile(filepath.Join(dir, "run", "round=000001", "k.bin"))
		require.NoError(t, err)
		require.Equal(t, data, onDisk)
		require.NoError(t, s.Close())

		// A second store on the same directory sees the object.
		again, err := storage.Open(ctx, "file://"+dir)
		require.NoError(t, err)
		got, err = storage.ReadAll(ctx, again, "run/round=000001/k.bin")
		require.NoError(t, err)
		require.Equal(t, data, got)
		require.NoError(t, again.Delete(ctx, "run/round=000001/k.bin"))
		_, err = os.Stat(filepath.Join(dir, "run", "round=000001", "k.bin"))
		require.ErrorIs(t, err, os.ErrNotExist, "Delete removes the file")
		require.NoError(t, again.Close())
	})

	t.Run("mem", func(t *testing.T) {
		name := "backends-open-each-scheme"
		t.Cleanup(func() { memstore.Forget(name) })
		w, err := storage.Open(ctx, "mem://"+name)
		require.NoError(t, err)
		_, ok := w.(*memstore.Store)
		require.True(t, ok, "mem:// opened a %T", w)
		require.NoError(t, storage.PutBytes(ctx, w, "a/k", data))
		got, err := storage.ReadAll(ctx, w, "a/k")
		require.NoError(t, err)
		require.Equal(t, data, got)

		// Another open of the same name shares the objects.
		r, err := storage.Open(ctx, "mem://"+name)
		require.NoError(t, err)
		got, err = storage.ReadAll(ctx, r, "a/k")
		require.NoError(t, err)
		require.Equal(t, data, got)

		// A prefix path is a view of the same namespace under PREFIX/.
		sub, err := storage.Open(ctx, "mem://"+name+"/a")
		require.NoError(t, err)
		got, err = storage.ReadAll(ctx, sub, "k")
		require.NoError(t, err)
		require.Equal(t, data, got)
		require.NoError(t, storage.PutBytes(ctx, sub, "j", []byte("via prefix")))
		got, err = storage.ReadAll(ctx, r, "a/j")
		require.NoError(t, err)
		require.Equal(t, "via prefix", string(got))

		// Another name is another namespace.
		otherName := name + "-other"
		t.Cleanup(func() { memstore.Forget(otherName) })
		other, err := storage.Open(ctx, "mem://"+otherName)
		require.NoError(t, err)
		_, err = storage.ReadAll(ctx, other, "a/k")
		require.ErrorIs(t, err, storage.ErrNotFound)

		for _, s := range []storage.Store{w, r, sub, other} {
			require.NoError(t, s.Close())
		}
	})
}

func TestRegisterDuplicatePanics(t *testing.T) {
	require.Panics(t, func() { storage.Register("mem", nil) })
}
