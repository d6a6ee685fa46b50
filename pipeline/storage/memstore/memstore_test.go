package memstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/pipeline/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seq atomic.Int64

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, err := storage.Open(context.Background(), fmt.Sprintf("mem://conformance-%d", seq.Add(1)))
		require.NoError(t, err)
		return s
	})
}

func TestConformanceWithPrefix(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		name := fmt.Sprintf("prefixed-%d", seq.Add(1))
		// A neighbour outside the prefix must stay invisible.
		require.NoError(t, storage.PutBytes(context.Background(), memstore.New(name), "outside", []byte("x")))
		s, err := storage.Open(context.Background(), "mem://"+name+"/runs/r1")
		require.NoError(t, err)
		return s
	})
}

func TestSharedByName(t *testing.T) {
	ctx := context.Background()
	a, err := storage.Open(ctx, "mem://shared-test")
	require.NoError(t, err)
	b, err := storage.Open(ctx, "mem://shared-test")
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(ctx, a, "k", []byte("v")))
	got, err := storage.ReadAll(ctx, b, "k")
	require.NoError(t, err)
	require.Equal(t, "v", string(got))
	p, err := storage.Open(ctx, "mem://shared-test/sub")
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(ctx, p, "k", []byte("under prefix")))
	got, err = storage.ReadAll(ctx, a, "sub/k")
	require.NoError(t, err)
	require.Equal(t, "under prefix", string(got))

	memstore.Forget("shared-test")
	c, err := storage.Open(ctx, "mem://shared-test")
	require.NoError(t, err)
	_, err = c.Stat(ctx, "k")
	require.ErrorIs(t, err, storage.ErrNotFound, "Forget starts the name afresh")
}

func TestClock(t *testing.T) {
	ctx := context.Background()
	s := memstore.New("clock-test")
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("X", 3600))
	s.SetClock(func() time.Time { return now })
	require.NoError(t, storage.PutBytes(ctx, s, "old", nil))
	now = now.Add(48 * time.Hour)
	require.NoError(t, storage.PutBytes(ctx, s, "new", nil))
	list, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, time.Date(2025, 3, 3, 11, 0, 0, 0, time.UTC), list[0].ModTime, "new, in UTC")
	require.Equal(t, time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC), list[1].ModTime, "old, in UTC")
	// The clock belongs to the name: another store on it sees it too.
	other := memstore.New("clock-test")
	require.NoError(t, storage.PutBytes(ctx, other, "other", nil))
	info, err := other.Stat(ctx, "other")
	require.NoError(t, err)
	require.Equal(t, now.UTC(), info.ModTime)
}

func TestOpenURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"mem://", "missing store name"},
		{"mem:///x", "missing store name"},
		{"mem://n?x=1", "not supported"},
		{"mem://u:p@n", "not supported"},
		{"mem://n/a/../b", "invalid key"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			require.NoError(t, err)
			_, err = memstore.OpenURL(u)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestBadURLs: a malformed mem:// URL is a bad store URL (ErrBadURL, exit
// 2 in the CLI) like a malformed file:// or s3:// one; it was a plain
// error.
func TestBadURLs(t *testing.T) {
	for _, raw := range []string{"mem://", "mem://x?a=b", "mem://u@x", "mem://x/../y"} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		_, err = memstore.OpenURL(u)
		require.ErrorIs(t, err, storage.ErrBadURL, raw)
	}
}

// TestHugeDeclaredSize: a Put declaring far more bytes than it sends used
// to allocate the declared size up front (a panic or an out-of-memory
// kill for sizes near 2^62); it is now the size-mismatch error.
func TestHugeDeclaredSize(t *testing.T) {
	s := memstore.New(t.Name())
	ctx := context.Background()
	err := s.Put(ctx, "k", strings.NewReader("short"), 1<<62)
	require.Error(t, err)
	err = s.PutIfAbsent(ctx, "k", strings.NewReader("short"), 1<<40)
	require.Error(t, err)
	_, err = s.Stat(ctx, "k")
	require.ErrorIs(t, err, storage.ErrNotFound)
}
