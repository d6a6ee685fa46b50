package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
)

func TestReaderAtIotest(t *testing.T) {
	ctx := context.Background()
	s := memstore.New("readerat-iotest")
	data := bytes.Repeat([]byte("0123456789"), 3000)
	require.NoError(t, storage.PutBytes(ctx, s, "k", data))
	ra, err := storage.NewReaderAt(ctx, s, "k")
	require.NoError(t, err)
	require.Equal(t, "k", ra.Key())
	// iotest.TestReader checks ReadAt among others via a SectionReader.
	require.NoError(t, iotest.TestReader(io.NewSectionReader(ra, 0, ra.Size()), data))
	_, err = ra.ReadAt(make([]byte, 1), -1)
	require.Error(t, err)
}

func TestReaderAtCancelled(t *testing.T) {
	s := memstore.New("readerat-cancel")
	require.NoError(t, storage.PutBytes(context.Background(), s, "k", []byte("hello")))
	ctx, cancel := context.WithCancel(context.Background())
	ra, err := storage.NewReaderAt(ctx, s, "k")
	require.NoError(t, err)
	cancel()
	_, err = ra.ReadAt(make([]byte, 2), 0)
	require.ErrorIs(t, err, context.Canceled)
}

// TestReaderAtShrunk: an object replaced by a shorter one after
// NewReaderAt must give an error, not silently short data.
func TestReaderAtShrunk(t *testing.T) {
	ctx := context.Background()
	s := memstore.New("readerat-shrunk")
	require.NoError(t, storage.PutBytes(ctx, s, "k", []byte("0123456789")))
	ra, err := storage.NewReaderAt(ctx, s, "k")
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(ctx, s, "k", []byte("01234")))
	n, err := ra.ReadAt(make([]byte, 4), 3)
	require.Equal(t, 2, n)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorContains(t, err, "shorter than its stat size 10")
}

func TestCounting(t *testing.T) {
	ctx := context.Background()
	cs := storage.Counting(memstore.New("counting"))
	require.NoError(t, storage.PutBytes(ctx, cs, "a", []byte("12345")))
	require.NoError(t, storage.PutBytesIfAbsent(ctx, cs, "b", []byte("678")))
	require.ErrorIs(t, storage.PutBytesIfAbsent(ctx, cs, "b", []byte("9")), storage.ErrExists)
	b, err := storage.ReadAll(ctx, cs, "a")
	require.NoError(t, err)
	require.Equal(t, "12345", string(b))
	rc, err := cs.GetRange(ctx, "b", 1, 10)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	_, err = cs.Get(ctx, "missing")
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = cs.Stat(ctx, "a")
	require.NoError(t, err)
	_, err = cs.List(ctx, "")
	require.NoError(t, err)
	require.NoError(t, cs.Delete(ctx, "a"))

	require.Equal(t, storage.Counts{
		Gets: 2, GetRanges: 1, Puts: 1, PutIfAbsents: 2, Stats: 1, Lists: 1, Deletes: 1,
		BytesRead: 5 + 2, BytesWritten: 5 + 3 + 1,
	}, cs.Counts())
	require.EqualValues(t, 9, cs.Counts().Requests())
	cs.Reset()
	require.Equal(t, storage.Counts{}, cs.Counts())
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "a/b", "a.b/c..d", "...", "a b/ü"} {
		require.NoError(t, storage.ValidateKey(k), k)
	}
	for _, k := range []string{"", "/a", "a/", "a//b", "..", "a/../b", "a\x00"} {
		err := storage.ValidateKey(k)
		require.True(t, errors.Is(err, storage.ErrInvalidKey), k)
	}
}

// TestOpenUnparseableURLHidesSecret: url.Parse's error quotes the whole
// URL, so a malformed URL with a secret in it (here a bad port after
// credentials) used to reach logs and stderr whole. Open now gives the
// parser's reason only, as a bad URL (exit 2).
func TestOpenUnparseableURLHidesSecret(t *testing.T) {
	_, err := storage.Open(context.Background(), "s3://AKIAEXAMPLE:s3cr3tPassw0rd@bucket:port/x?secret_key=hunter2")
	require.Error(t, err)
	require.ErrorIs(t, err, storage.ErrBadURL)
	for _, secret := range []string{"s3cr3tPassw0rd", "hunter2", "AKIAEXAMPLE"} {
		require.NotContains(t, err.Error(), secret)
	}
	require.Contains(t, err.Error(), "invalid port")
}
