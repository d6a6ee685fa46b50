package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// spadeReadOnly runs spade in a private mount namespace where dir is
// bind-mounted read-only (EROFS for every write, root included). It skips
// the test where no such mount can be made (not root, no unshare).
func spadeReadOnly(t *testing.T, o *opsEnv, dir string, args ...string) result {
	t.Helper()
	const script = `d=$1; shift; mount --bind -o ro "$d" "$d" || exit 200; exec "$@"`
	cmd := exec.Command("unshare", append([]string{"-m", "sh", "-c", script, "sh", dir, spadeBin}, o.args(o.store, args)...)...)
	cmd.Dir = o.dir
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Skipf("no read-only bind mount here: %v", err)
	}
	if r.code == 200 || (r.code != 0 && bytes.Contains(se.Bytes(), []byte("unshare:"))) {
		t.Skipf("no read-only bind mount here: %s", r.stderr)
	}
	return r
}

// TestRoundSealedReadOnlyStore: `spade round N` on a sealed round is a
// no-op (exit 0, "nothing to do") also on a store mounted read-only: it
// used to exit 1, because the run file was written (put-if-absent, a temp
// file first) before the seal was looked at. A round that has work to do
// fails with the store's error, naming the store and the path.
func TestRoundSealedReadOnlyStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a round in a subprocess")
	}
	o := newOpsEnv(t)
	o.must(t, nil, "round", "1")
	runs := filepath.Join(o.dir, "runs")
	before := storeFiles(t, runs)

	for _, args := range [][]string{{"round", "1"}, {"round", "1", "--json"}} {
		r := spadeReadOnly(t, o, runs, args...)
		require.Equal(t, 0, r.code, "spade %v on a read-only store:\n%s%s", args, r.stdout, r.stderr)
		require.Empty(t, r.stderr)
	}
	r := spadeReadOnly(t, o, runs, "round", "1")
	require.Contains(t, r.stdout, "round 1 of run default is already committed")

	r = spadeReadOnly(t, o, runs, "round", "2")
	require.Equal(t, exitFailure, r.code, "%s%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "in "+o.store+": ")
	require.Contains(t, r.stderr, "read-only file system")
	require.Equal(t, before, storeFiles(t, runs), "nothing was written")
}

// storeFiles lists every file under dir, temp files included.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	}))
	return out
}
