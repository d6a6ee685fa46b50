// Package storagetest is the conformance suite for storage.Store: every
// backend's tests call Run, so the contract written on storage.Store is
// checked the same way for file://, s3:// and mem:// (the pattern of
// go-cloud's drivertest and restic's backend test suite).
package storagetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// LargeSize is the size in bytes of the suite's large object: over two
// parts of S3's minimum multipart part size (5 MiB), so an s3 store opened
// with part_size=5242880 uploads it in three parts. Backends with a larger
// part size should be opened with a small one for the suite.
const LargeSize = 11<<20 + 7

// Run runs the whole conformance suite as subtests of t. open must return
// a new, empty store each call (a fresh directory, namespace or S3 prefix);
// Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) storage.Store) {
	fresh := func(t *testing.T) storage.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s storage.Store)
	}{
		{"NotFound", testNotFound},
		{"PutGetStat", testPutGetStat},
		{"GetRange", testGetRange},
		{"Overwrite", testOverwrite},
		{"AtomicOverwrite", testAtomicOverwrite},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"List", testList},
		{"ListSkipsInFlightWrites", testListSkipsInFlight},
		{"Delete", testDelete},
		{"InvalidKeys", testInvalidKeys},
		{"CancelledContext", testCancelled},
		{"CancelledMidPut", testCancelledMidPut},
		{"SizeMismatch", testSizeMismatch},
		{"UnknownSize", testUnknownSize},
		{"LargeObject", testLarge},
		{"EmptyObject", testEmpty},
		{"UnusualKeys", testUnusualKeys},
		{"ReaderAt", testReaderAt},
		{"URL", testURL},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, fresh(t)) })
	}
}

// payload returns n deterministic pseudo-random bytes for seed.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

func put(t *testing.T, s storage.Store, key string, b []byte) {
	t.Helper()
	require.NoError(t, storage.PutBytes(context.Background(), s, key, b), "put %s", key)
}

func get(t *testing.T, s storage.Store, key string) []byte {
	t.Helper()
	b, err := storage.ReadAll(context.Background(), s, key)
	require.NoError(t, err, "get %s", key)
	return b
}

func getRange(t *testing.T, s storage.Store, key string, off, n int64) []byte {
	t.Helper()
	rc, err := s.GetRange(context.Background(), key, off, n)
	require.NoError(t, err, "get range %s [%d,+%d)", key, off, n)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

func keys(infos []storage.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Key
	}
	return out
}

func testNotFound(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "present/x", []byte("x")) // a sibling must not confuse the lookup
	for _, key := range []string{"missing", "present/missing", "present/x/below", "present"} {
		t.Run(key, func(t *testing.T) {
			_, err := s.Get(ctx, key)
			require.ErrorIs(t, err, storage.ErrNotFound, "Get")
			require.Contains(t, err.Error(), key, "error names the key")
			_, err = s.GetRange(ctx, key, 0, 1)
			require.ErrorIs(t, err, storage.ErrNotFound, "GetRange")
			_, err = s.GetRange(ctx, key, 0, 0)
			require.ErrorIs(t, err, storage.ErrNotFound, "GetRange zero length")
			_, err = s.Stat(ctx, key)
			require.ErrorIs(t, err, storage.ErrNotFound, "Stat")
			err = s.Delete(ctx, key)
			require.ErrorIs(t, err, storage.ErrNotFound, "Delete")
		})
	}
}

func testPutGetStat(t *testing.T, s storage.Store) {
	ctx := context.Background()
	before := time.Now().Add(-time.Hour)
	data := payload(1, 1000)
	put(t, s, "runs/r1/manifest.json", data)
	require.Equal(t, data, get(t, s, "runs/r1/manifest.json"))
	info, err := s.Stat(ctx, "runs/r1/manifest.json")
	require.NoError(t, err)
	require.Equal(t, "runs/r1/manifest.json", info.Key)
	require.EqualValues(t, len(data), info.Size)
	require.False(t, info.ModTime.IsZero(), "ModTime set")
	require.Equal(t, time.UTC, info.ModTime.Location(), "ModTime in UTC")
	require.True(t, info.ModTime.After(before), "ModTime %v is recent", info.ModTime)
}

func testGetRange(t *testing.T, s storage.Store) {
	data := payload(2, 4096)
	put(t, s, "obj", data)
	n := int64(len(data))
	for _, tc := range []struct {
		name        string
		off, length int64
		want        []byte
	}{
		{"whole", 0, n, data},
		{"prefix", 0, 10, data[:10]},
		{"middle", 1000, 517, data[1000:1517]},
		{"suffix", n - 5, 5, data[n-5:]},
		{"past end is cut", n - 5, 100, data[n-5:]},
		{"offset at end", n, 10, nil},
		{"offset beyond end", n + 100, 10, nil},
		{"zero length", 100, 0, nil},
		{"zero length at end", n, 0, nil},
		{"one byte", 4095, 1, data[4095:]},
		{"huge length", 10, 1<<63 - 1, data[10:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := getRange(t, s, "obj", tc.off, tc.length)
			require.Equal(t, len(tc.want), len(got))
			require.True(t, bytes.Equal(tc.want, got), "range bytes differ")
		})
	}
	t.Run("negative", func(t *testing.T) {
		_, err := s.GetRange(context.Background(), "obj", -1, 10)
		require.Error(t, err)
		_, err = s.GetRange(context.Background(), "obj", 0, -1)
		require.Error(t, err)
	})
}

func testOverwrite(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "k", []byte("first version, longer"))
	put(t, s, "k", []byte("second"))
	require.Equal(t, "second", string(get(t, s, "k")))
	info, err := s.Stat(ctx, "k")
	require.NoError(t, err)
	require.EqualValues(t, 6, info.Size)
	list, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"k"}, keys(list), "overwrite leaves one object")
}

// testAtomicOverwrite reads while a writer replaces the object: every read
// must see one whole version, never a prefix or a mix.
func testAtomicOverwrite(t *testing.T, s storage.Store) {
	ctx := context.Background()
	const size = 256 << 10
	versions := [][]byte{bytes.Repeat([]byte{'A'}, size), bytes.Repeat([]byte{'B'}, size)}
	put(t, s, "hot", versions[0])
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 1; i <= 6; i++ {
			v := versions[i%2]
			if err := s.Put(ctx, "hot", bytes.NewReader(v), int64(len(v))); err != nil {
				errc <- err
				return
			}
		}
	}()
	reads := 0
	for stop := false; !stop; reads++ {
		select {
		case <-done:
			stop = true
		default:
		}
		b := get(t, s, "hot")
		require.Len(t, b, size, "read %d saw a partial object", reads)
		require.True(t, bytes.Equal(b, versions[0]) || bytes.Equal(b, versions[1]), "read %d saw a mixed object", reads)
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("writer: %v", err)
	default:
	}
}

func testPutIfAbsent(t *testing.T, s storage.Store) {
	ctx := context.Background()
	require.NoError(t, storage.PutBytesIfAbsent(ctx, s, "m/manifest.json", []byte("one")))
	err := storage.PutBytesIfAbsent(ctx, s, "m/manifest.json", []byte("two"))
	require.ErrorIs(t, err, storage.ErrExists)
	require.Contains(t, err.Error(), "m/manifest.json", "error names the key")
	require.Equal(t, "one", string(get(t, s, "m/manifest.json")), "loser did not overwrite")
	// After Put the key exists for PutIfAbsent too, and after Delete it is free.
	put(t, s, "p", []byte("put"))
	require.ErrorIs(t, storage.PutBytesIfAbsent(ctx, s, "p", []byte("x")), storage.ErrExists)
	require.NoError(t, s.Delete(ctx, "p"))
	require.NoError(t, storage.PutBytesIfAbsent(ctx, s, "p", []byte("again")))
	require.Equal(t, "again", string(get(t, s, "p")))
}

// testPutIfAbsentRace is the commit protocol's core guarantee: among
// writers racing to create one manifest exactly one wins, and the object
// holds the winner's bytes.
func testPutIfAbsentRace(t *testing.T, s storage.Store) {
	const writers = 8
	const rounds = 4
	ctx := context.Background()
	for round := 0; round < rounds; round++ {
		key := fmt.Sprintf("race/%d/manifest.json", round)
		bodies := make([][]byte, writers)
		for i := range bodies {
			// Big enough that the writes overlap in time.
			bodies[i] = bytes.Repeat([]byte(fmt.Sprintf("writer %d round %d\n", i, round)), 4096)
		}
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < writers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.PutIfAbsent(ctx, key, bytes.NewReader(bodies[i]), int64(len(bodies[i])))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: writers %d and %d both won", round, winner, i)
				winner = i
				continue
			}
			require.ErrorIs(t, err, storage.ErrExists, "round %d writer %d", round, i)
		}
		require.NotEqual(t, -1, winner, "round %d: no writer won", round)
		require.True(t, bytes.Equal(bodies[winner], get(t, s, key)), "round %d: object does not hold the winner's bytes", round)
	}
}

func testList(t *testing.T, s storage.Store) {
	ctx := context.Background()
	all := []string{"a-x", "a.x", "a/b/x", "a/bc/d", "a/bz", "ab", "b/c/d/e"}
	// Write in an order unrelated to the sorted one.
	for i, k := range []string{"a/bz", "b/c/d/e", "a/b/x", "ab", "a.x", "a/bc/d", "a-x"} {
		put(t, s, k, bytes.Repeat([]byte{'x'}, i+1))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", all},
		{"a", []string{"a-x", "a.x", "a/b/x", "a/bc/d", "a/bz", "ab"}},
		{"a/", []string{"a/b/x", "a/bc/d", "a/bz"}},
		{"a/b", []string{"a/b/x", "a/bc/d", "a/bz"}}, // plain string prefix, not a directory
		{"a/b/", []string{"a/b/x"}},
		{"a/bc", []string{"a/bc/d"}},
		{"a/bc/d", []string{"a/bc/d"}},
		{"b/c/d/", []string{"b/c/d/e"}},
		{"b/c/d/e/", nil},
		{"zzz", nil},
		{"a//", nil},
		{"../", nil},
	} {
		t.Run("prefix="+tc.prefix, func(t *testing.T) {
			got, err := s.List(ctx, tc.prefix)
			require.NoError(t, err)
			if tc.want == nil {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, keys(got))
		})
	}
	got, err := s.List(ctx, "a/bz")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.EqualValues(t, 1, got[0].Size, "List reports sizes")
	require.False(t, got[0].ModTime.IsZero(), "List reports ModTime")
}

// testListSkipsInFlightWrites lists while writes are in progress: List
// must never show a temp file or an object that was not committed whole.
func testListSkipsInFlight(t *testing.T, s storage.Store) {
	ctx := context.Background()
	const size = 512 << 10
	want := map[string]bool{}
	for i := 0; i < 6; i++ {
		want[fmt.Sprintf("w/obj-%d", i)] = true
	}
	var committed sync.Map
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; i < 6; i++ {
			key := fmt.Sprintf("w/obj-%d", i)
			body := payload(uint64(i), size)
			var err error
			if i%2 == 0 {
				err = s.Put(ctx, key, bytes.NewReader(body), size)
			} else {
				err = s.PutIfAbsent(ctx, key, bytes.NewReader(body), size)
			}
			if err != nil {
				errc <- err
				return
			}
			committed.Store(key, true)
		}
	}()
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		seenBefore := map[string]bool{}
		committed.Range(func(k, _ any) bool { seenBefore[k.(string)] = true; return true })
		got, err := s.List(ctx, "")
		require.NoError(t, err)
		for _, in := range got {
			require.True(t, want[in.Key], "List returned %q, which is not an object key", in.Key)
			require.EqualValues(t, size, in.Size, "List returned %q before it was whole", in.Key)
		}
		for k := range seenBefore {
			require.Contains(t, keys(got), k, "committed object missing from List")
		}
	}
	select {
	case err := <-errc:
		t.Fatalf("writer: %v", err)
	default:
	}
	got, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, got, len(want))
}

func testDelete(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "d/a/x", []byte("x"))
	put(t, s, "d/a/y", []byte("y"))
	put(t, s, "d/b", []byte("b"))
	require.NoError(t, s.Delete(ctx, "d/a/x"))
	_, err := s.Stat(ctx, "d/a/x")
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.ErrorIs(t, s.Delete(ctx, "d/a/x"), storage.ErrNotFound, "second delete")
	require.Equal(t, "y", string(get(t, s, "d/a/y")), "sibling survives")
	list, err := s.List(ctx, "d/")
	require.NoError(t, err)
	require.Equal(t, []string{"d/a/y", "d/b"}, keys(list))
	// Emptying a "directory" frees its name for an object.
	require.NoError(t, s.Delete(ctx, "d/a/y"))
	put(t, s, "d/a", []byte("now an object"))
	require.Equal(t, "now an object", string(get(t, s, "d/a")))
}

// InvalidKeys lists keys every backend must reject with ErrInvalidKey.
var InvalidKeys = []string{"", "/", "/a", "a/", "a//b", ".", "..", "./a", "a/./b", "../a", "a/..", "a/../b", "a\x00b"}

func testInvalidKeys(t *testing.T, s storage.Store) {
	ctx := context.Background()
	for _, key := range InvalidKeys {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			ops := map[string]error{}
			_, ops["Get"] = s.Get(ctx, key)
			_, ops["GetRange"] = s.GetRange(ctx, key, 0, 1)
			ops["Put"] = storage.PutBytes(ctx, s, key, []byte("x"))
			ops["PutIfAbsent"] = storage.PutBytesIfAbsent(ctx, s, key, []byte("x"))
			_, ops["Stat"] = s.Stat(ctx, key)
			ops["Delete"] = s.Delete(ctx, key)
			for op, err := range ops {
				require.ErrorIs(t, err, storage.ErrInvalidKey, op)
			}
		})
	}
	list, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Empty(t, list, "no invalid key was stored")
}

func testCancelled(t *testing.T, s storage.Store) {
	put(t, s, "exists", []byte("data"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ops := map[string]error{}
	_, ops["Get"] = s.Get(ctx, "exists")
	_, ops["GetRange"] = s.GetRange(ctx, "exists", 0, 2)
	ops["Put"] = storage.PutBytes(ctx, s, "new", []byte("x"))
	ops["PutIfAbsent"] = storage.PutBytesIfAbsent(ctx, s, "new2", []byte("x"))
	_, ops["Stat"] = s.Stat(ctx, "exists")
	_, ops["List"] = s.List(ctx, "")
	ops["Delete"] = s.Delete(ctx, "exists")
	for op, err := range ops {
		require.ErrorIs(t, err, context.Canceled, op)
	}
	bg := context.Background()
	require.Equal(t, "data", string(get(t, s, "exists")), "cancelled Delete kept the object")
	for _, k := range []string{"new", "new2"} {
		_, err := s.Stat(bg, k)
		require.ErrorIs(t, err, storage.ErrNotFound, "cancelled put of %s left an object", k)
	}

	// Cancelling after Get returned stops reading the body.
	rctx, rcancel := context.WithCancel(context.Background())
	rc, err := s.Get(rctx, "exists")
	require.NoError(t, err)
	rcancel()
	_, err = io.ReadAll(rc)
	require.ErrorIs(t, err, context.Canceled, "read after cancel")
	require.NoError(t, rc.Close())
}

// cancellingReader yields its data in small chunks and cancels the
// context once it has handed out `after` bytes.
type cancellingReader struct {
	data   []byte
	after  int
	cancel context.CancelFunc
	pos    int
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	if c.pos >= len(c.data) {
		return 0, io.EOF
	}
	if c.pos >= c.after {
		c.cancel()
	}
	n := copy(p[:min(len(p), 4096)], c.data[c.pos:])
	c.pos += n
	return n, nil
}

func testCancelledMidPut(t *testing.T, s storage.Store) {
	data := payload(3, 1<<20)
	for _, op := range []string{"Put", "PutIfAbsent"} {
		for _, size := range []int64{int64(len(data)), -1} {
			t.Run(fmt.Sprintf("%s/size=%d", op, size), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				r := &cancellingReader{data: data, after: 64 << 10, cancel: cancel}
				key := "mid/" + op
				var err error
				if op == "Put" {
					err = s.Put(ctx, key, r, size)
				} else {
					err = s.PutIfAbsent(ctx, key, r, size)
				}
				require.ErrorIs(t, err, context.Canceled)
				_, err = s.Stat(context.Background(), key)
				require.ErrorIs(t, err, storage.ErrNotFound, "cancelled write left an object")
			})
		}
	}
	list, err := s.List(context.Background(), "")
	require.NoError(t, err)
	require.Empty(t, list, "cancelled writes left objects or temp files visible")
}

func testSizeMismatch(t *testing.T, s storage.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		body     string
		declared int64
	}{
		{"short", "12345", 10},
		{"long", "1234567890", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "size/" + tc.name
			require.Error(t, s.Put(ctx, key, strings.NewReader(tc.body), tc.declared))
			require.Error(t, s.PutIfAbsent(ctx, key, strings.NewReader(tc.body), tc.declared))
			_, err := s.Stat(ctx, key)
			require.ErrorIs(t, err, storage.ErrNotFound, "mismatched write left an object")
		})
	}
}

func testUnknownSize(t *testing.T, s storage.Store) {
	ctx := context.Background()
	data := payload(4, 70000)
	require.NoError(t, s.Put(ctx, "u/put", io.MultiReader(bytes.NewReader(data[:1000]), bytes.NewReader(data[1000:])), -1))
	require.NoError(t, s.PutIfAbsent(ctx, "u/pia", bytes.NewReader(data), -1))
	require.True(t, bytes.Equal(data, get(t, s, "u/put")))
	require.True(t, bytes.Equal(data, get(t, s, "u/pia")))
}

func testLarge(t *testing.T, s storage.Store) {
	ctx := context.Background()
	data := payload(5, LargeSize)
	require.NoError(t, s.Put(ctx, "big/put", bytes.NewReader(data), int64(len(data))))
	require.True(t, bytes.Equal(data, get(t, s, "big/put")), "large Put round trip")
	info, err := s.Stat(ctx, "big/put")
	require.NoError(t, err)
	require.EqualValues(t, LargeSize, info.Size)
	// A range across the 5 MiB part boundary.
	off := int64(5<<20 - 100)
	require.True(t, bytes.Equal(data[off:off+200], getRange(t, s, "big/put", off, 200)))
	// Unknown size takes the streaming path.
	require.NoError(t, s.Put(ctx, "big/stream", io.MultiReader(bytes.NewReader(data)), -1))
	require.True(t, bytes.Equal(data, get(t, s, "big/stream")), "large unknown-size Put round trip")
	// Conditional create of a large object.
	require.NoError(t, s.PutIfAbsent(ctx, "big/pia", bytes.NewReader(data), int64(len(data))))
	err = s.PutIfAbsent(ctx, "big/pia", bytes.NewReader(data[:LargeSize-1]), LargeSize-1)
	require.ErrorIs(t, err, storage.ErrExists)
	require.True(t, bytes.Equal(data, get(t, s, "big/pia")), "large PutIfAbsent round trip")
}

func testEmpty(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "empty/put", nil)
	require.NoError(t, s.PutIfAbsent(ctx, "empty/pia", bytes.NewReader(nil), 0))
	require.ErrorIs(t, s.PutIfAbsent(ctx, "empty/pia", bytes.NewReader(nil), 0), storage.ErrExists)
	for _, k := range []string{"empty/put", "empty/pia"} {
		require.Empty(t, get(t, s, k))
		require.Empty(t, getRange(t, s, k, 0, 10))
		require.Empty(t, getRange(t, s, k, 5, 10))
		info, err := s.Stat(ctx, k)
		require.NoError(t, err)
		require.EqualValues(t, 0, info.Size)
	}
	list, err := s.List(ctx, "empty/")
	require.NoError(t, err)
	require.Equal(t, []string{"empty/pia", "empty/put"}, keys(list))
}

func testUnusualKeys(t *testing.T, s storage.Store) {
	ctx := context.Background()
	ks := []string{
		"with space/file name.parquet",
		"plus+equals=percent%20amp&q?hash#",
		"ünïcödé/数据/ключ",
		"dots.../..x/x..",
		"tilde~star*colon:",
	}
	for i, k := range ks {
		put(t, s, k, []byte(fmt.Sprint(i)))
	}
	for i, k := range ks {
		require.Equal(t, fmt.Sprint(i), string(get(t, s, k)), k)
	}
	list, err := s.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, len(ks))
	list, err = s.List(ctx, "ünïcödé/")
	require.NoError(t, err)
	require.Equal(t, []string{"ünïcödé/数据/ключ"}, keys(list))
}

func testReaderAt(t *testing.T, s storage.Store) {
	ctx := context.Background()
	data := payload(6, 10000)
	put(t, s, "ra", data)
	cs := storage.Counting(s)
	ra, err := storage.NewReaderAt(ctx, cs, "ra")
	require.NoError(t, err)
	require.EqualValues(t, len(data), ra.Size())
	buf := make([]byte, 100)
	n, err := ra.ReadAt(buf, 5000)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	require.Equal(t, data[5000:5100], buf)
	n, err = ra.ReadAt(buf, 9950)
	require.ErrorIs(t, err, io.EOF, "short read at the end returns io.EOF")
	require.Equal(t, 50, n)
	require.Equal(t, data[9950:], buf[:n])
	n, err = ra.ReadAt(buf, 10000)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 0, n)
	c := cs.Counts()
	require.EqualValues(t, 1, c.Stats)
	require.EqualValues(t, 2, c.GetRanges, "a read at the end needs no request")
	require.EqualValues(t, 150, c.BytesRead, "only the requested bytes were fetched")
	_, err = storage.NewReaderAt(ctx, s, "missing")
	require.ErrorIs(t, err, storage.ErrNotFound)

	// Concurrent ReadAt calls, as parquet-go issues them.
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 1000)
			if n, err := ra.ReadAt(b, int64(i*1000)); err != nil || n != 1000 || !bytes.Equal(b, data[i*1000:(i+1)*1000]) {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Zero(t, bad.Load(), "concurrent ReadAt returned wrong bytes")
}

func testURL(t *testing.T, s storage.Store) {
	u := s.URL()
	require.NotEmpty(t, u)
	require.True(t, strings.Contains(u, "://"), "URL %q has a scheme", u)
	require.NotContains(t, strings.ToLower(u), "secret")
}
