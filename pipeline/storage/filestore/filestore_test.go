package filestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/pipeline/storage/storagetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperPutIfAbsent())
	}
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		dir := t.TempDir()
		s, err := storage.Open(context.Background(), "file://"+filepath.ToSlash(dir))
		require.NoError(t, err)
		t.Cleanup(func() { requireNoTempFiles(t, dir) })
		return s
	})
}

// requireNoTempFiles checks that no write, failed or not, left a temp file.
func requireNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), filestore.TempPrefix) {
			return fmt.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
	require.NoError(t, err)
}

func TestRootFromURL(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	for _, tc := range []struct{ url, want, err string }{
		{url: "file:///abs/dir", want: "/abs/dir"},
		{url: "file:///abs/dir/", want: "/abs/dir"},
		{url: "file://localhost/abs", want: "/abs"},
		{url: "file://./runs", want: filepath.Join(wd, "runs")},
		{url: "file://.", want: wd},
		{url: "file://../data/runs", want: filepath.Join(filepath.Dir(wd), "data", "runs")},
		{url: "file:runs", want: filepath.Join(wd, "runs")},
		{url: "file:///a/../b", want: "/b"},
		{url: "file://server/share", err: `host "server" is not local`},
		{url: "file://", err: "empty path"},
		{url: "file:///x?mode=1", err: "not supported"},
		{url: "file://user:pw@localhost/x", err: "not supported"},
		{url: "s3://b/x", err: "scheme is not file"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			require.NoError(t, err)
			got, err := filestore.RootFromURL(u)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "pw", "password not echoed")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestOpenRelativeCreatesRootAtFirstWrite(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s, err := storage.Open(context.Background(), "file://./runs/deep")
	require.NoError(t, err)
	require.Equal(t, "file://./runs/deep", s.URL())
	require.Equal(t, filepath.Join(dir, "runs", "deep"), s.(*filestore.Store).Root())
	// Opening and reading create nothing: read-only commands leave no
	// directory behind.
	_, err = storage.ReadAll(context.Background(), s, "r1/manifest.json")
	require.ErrorIs(t, err, storage.ErrNotFound)
	infos, err := s.List(context.Background(), "r1/")
	require.NoError(t, err)
	require.Empty(t, infos)
	_, err = os.Stat(filepath.Join(dir, "runs"))
	require.True(t, os.IsNotExist(err), "open or read created the root: %v", err)
	require.NoError(t, storage.PutBytes(context.Background(), s, "r1/manifest.json", []byte("{}")))
	b, err := os.ReadFile(filepath.Join(dir, "runs", "deep", "r1", "manifest.json"))
	require.NoError(t, err)
	require.Equal(t, "{}", string(b))
	// The root was resolved at Open: moving away does not move the store.
	t.Chdir(t.TempDir())
	got, err := storage.ReadAll(context.Background(), s, "r1/manifest.json")
	require.NoError(t, err)
	require.Equal(t, "{}", string(got))
}

func TestOpenRootIsFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	_, err := storage.Open(context.Background(), "file://"+f)
	require.ErrorContains(t, err, f)
}

func TestReservedTempPrefix(t *testing.T) {
	s, err := filestore.New(t.TempDir())
	require.NoError(t, err)
	err = storage.PutBytes(context.Background(), s, "a/"+filestore.TempPrefix+"x", []byte("x"))
	require.ErrorIs(t, err, storage.ErrInvalidKey)
	require.ErrorContains(t, err, "reserved")
}

func TestKeyVersusDirectory(t *testing.T) {
	ctx := context.Background()
	s, err := filestore.New(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(ctx, s, "a/b", []byte("x")))
	for name, put := range map[string]func(string) error{
		"Put":         func(k string) error { return storage.PutBytes(ctx, s, k, []byte("y")) },
		"PutIfAbsent": func(k string) error { return storage.PutBytesIfAbsent(ctx, s, k, []byte("y")) },
	} {
		t.Run(name, func(t *testing.T) {
			err := put("a")
			require.ErrorContains(t, err, "directory of other keys")
			require.NotErrorIs(t, err, storage.ErrExists)
			err = put("a/b/c")
			require.ErrorContains(t, err, "a parent of the key is itself an object (a/b)")
		})
	}
	got, err := storage.ReadAll(ctx, s, "a/b")
	require.NoError(t, err)
	require.Equal(t, "x", string(got))
	requireNoTempFiles(t, s.Root())
}

// TestListDoesNotLeaveRoot makes sure a List prefix cannot walk outside
// the root even though List takes prefixes, not validated keys.
func TestListDoesNotLeaveRoot(t *testing.T) {
	parent := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(parent, "secret"), []byte("x"), 0o644))
	s, err := filestore.New(filepath.Join(parent, "root"))
	require.NoError(t, err)
	for _, prefix := range []string{"../", "../secret", "/", "/etc/", "./"} {
		got, err := s.List(context.Background(), prefix)
		require.NoError(t, err)
		require.Empty(t, got, prefix)
	}
}

const helperEnv = "SPADE_FILESTORE_HELPER"

// helperPutIfAbsent runs in a child process: one PutIfAbsent on the shared
// key, printing "won" or "exists".
func helperPutIfAbsent() int {
	dir, id := os.Getenv(helperEnv), os.Getenv("SPADE_FILESTORE_HELPER_ID")
	s, err := filestore.New(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	body := bytes.Repeat([]byte("process "+id+"\n"), 1<<14)
	err = s.PutIfAbsent(context.Background(), "commit/manifest.json", bytes.NewReader(body), int64(len(body)))
	switch {
	case err == nil:
		fmt.Print("won " + id)
	case errors.Is(err, storage.ErrExists):
		fmt.Print("exists")
	default:
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// TestPutIfAbsentAcrossProcesses races PutIfAbsent from separate processes
// (this test binary re-executed), the case link(2) exists for.
func TestPutIfAbsentAcrossProcesses(t *testing.T) {
	const procs = 6
	for round := 0; round < 3; round++ {
		dir := t.TempDir()
		cmds := make([]*exec.Cmd, procs)
		outs := make([]*bytes.Buffer, procs)
		for i := range cmds {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+dir, fmt.Sprintf("SPADE_FILESTORE_HELPER_ID=%d", i))
			outs[i] = &bytes.Buffer{}
			cmd.Stdout = outs[i]
			cmd.Stderr = outs[i]
			cmds[i] = cmd
			require.NoError(t, cmd.Start())
		}
		winner := ""
		for i, cmd := range cmds {
			require.NoError(t, cmd.Wait(), "helper %d: %s", i, outs[i])
			out := outs[i].String()
			if strings.HasPrefix(out, "won ") {
				require.Empty(t, winner, "two processes won: %s and %s", winner, out)
				winner = strings.TrimPrefix(out, "won ")
			} else {
				require.Equal(t, "exists", out)
			}
		}
		require.NotEmpty(t, winner, "no process won")
		b, err := os.ReadFile(filepath.Join(dir, "commit", "manifest.json"))
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(b, []byte("process "+winner+"\n")), "object holds the winner's bytes")
		requireNoTempFiles(t, dir)
	}
}

func FuzzRootFromURL(f *testing.F) {
	for _, s := range []string{"file:///abs", "file://./runs", "file://../x", "file:rel", "file://h/x", "file://", "file:///a/../../b", "file://%2e%2e/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		root, err := filestore.RootFromURL(u)
		if err != nil {
			return
		}
		if !filepath.IsAbs(root) || filepath.Clean(root) != root {
			t.Fatalf("RootFromURL(%q) = %q: not absolute and clean", raw, root)
		}
	})
}

// TestTempCollector: the temp files a killed writer leaves behind are
// listed (and only they) and removed by ListTemp and DeleteTemp, which
// refuse keys that are not temp files.
func TestTempCollector(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := filestore.New(root)
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(ctx, s, "run/round=000001/t/part-0.parquet", []byte("data")))
	left := filepath.Join(root, "run", "round=000001", "t", filestore.TempPrefix+"123")
	require.NoError(t, os.WriteFile(left, []byte("half a file"), 0o600))
	other := filepath.Join(root, "other", filestore.TempPrefix+"9")
	require.NoError(t, os.MkdirAll(filepath.Dir(other), 0o755))
	require.NoError(t, os.WriteFile(other, []byte("x"), 0o600))

	temps, err := s.ListTemp(ctx, "run/")
	require.NoError(t, err)
	require.Len(t, temps, 1)
	require.Equal(t, "run/round=000001/t/"+filestore.TempPrefix+"123", temps[0].Key)
	require.EqualValues(t, len("half a file"), temps[0].Size)
	all, err := s.ListTemp(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 2)
	none, err := s.ListTemp(ctx, "absent/")
	require.NoError(t, err)
	require.Empty(t, none)

	for _, bad := range []string{"run/round=000001/t/part-0.parquet", "run/../" + filestore.TempPrefix + "1", "/" + filestore.TempPrefix + "1"} {
		require.ErrorIs(t, s.DeleteTemp(ctx, bad), storage.ErrInvalidKey, bad)
	}
	require.NoError(t, s.DeleteTemp(ctx, temps[0].Key))
	require.ErrorIs(t, s.DeleteTemp(ctx, temps[0].Key), storage.ErrNotFound)
	_, err = s.Stat(ctx, "run/round=000001/t/part-0.parquet")
	require.NoError(t, err, "the object beside it stays")
	require.NoError(t, s.DeleteTemp(ctx, all[0].Key))
	_, err = os.Stat(filepath.Dir(other))
	require.ErrorIs(t, err, fs.ErrNotExist, "the directory it left empty is removed")
}
