package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/track"
	"github.com/spade-pipeline/spade/internal/pyenv"
)

// startMLflow starts a real MLflow tracking server (the pinned venv's
// `mlflow server`, SQLite backend) on a free loopback port and returns its
// URL; the server is stopped when the test ends.
func startMLflow(t *testing.T, py, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	cmd := exec.Command(py, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--workers", "1",
		"--backend-store-uri", "sqlite:///"+filepath.Join(dir, "mlflow.db"), "--default-artifact-root", filepath.Join(dir, "artifacts"))
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "mlflow-server.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		_ = logf.Close()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "mlflow-server.log"))
			t.Fatalf("mlflow server on %s did not answer /health: %v\n%s", url, err, log)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestTrackers runs three offline rounds with observe.trackers set to
// mlflow (a real tracking server on loopback), wandb (offline mode) and
// tensorboard, and reads every tracker back with its own reader
// (testdata/trackers/read_back.py): each key of each round's metrics and
// train_metrics tables is there exactly once, at step = round, with the
// table's value. Round 1 runs without trackers and is logged later by
// `spade track --all`, which skips rounds 2 and 3 (logged by `spade
// round`); a repeated `spade round 3` logs nothing either. The tracker
// settings are operational: turning them on does not conflict with the
// run's pinned config.
func TestTrackers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the trackers' clients take tens of seconds to start")
	}
	py := pyenv.Require(t, "mlflow", "wandb", "tensorboard")
	o := newOpsEnv(t)
	mlflowURL := startMLflow(t, py, o.dir)
	wandbDir, tbDir := filepath.Join(o.dir, "wandb"), filepath.Join(o.dir, "tb")
	env := []string{
		"SPADE_OBSERVE_TRACKERS=mlflow,wandb,tensorboard",
		"SPADE_OBSERVE_PYTHON=" + py,
		"SPADE_OBSERVE_MLFLOW_TRACKING_URI=" + mlflowURL,
		"SPADE_OBSERVE_WANDB_DIR=" + wandbDir,
		"SPADE_OBSERVE_TENSORBOARD_DIR=" + tbDir,
		"WANDB_API_KEY=", "WANDB_BASE_URL=http://127.0.0.1:9", // offline: nothing may leave the machine
	}
	o.must(t, nil, "round", "1")
	o.must(t, env, "round", "2")
	o.must(t, env, "round", "3")
	out := o.must(t, env, "track", "--all")
	require.Equal(t, "round 1 of run default: mlflow logged, wandb logged, tensorboard logged\n"+
		"round 2 of run default: mlflow already logged, wandb already logged, tensorboard already logged\n"+
		"round 3 of run default: mlflow already logged, wandb already logged, tensorboard already logged\n", out)
	o.must(t, env, "round", "3")
	r := o.spade(t, nil, "track", "--round", "1")
	require.Equal(t, exitUsage, r.code, "no trackers configured: %s", r.stderr)

	helper, err := filepath.Abs("../../engines/track/spade_track.py")
	require.NoError(t, err)
	req, err := json.Marshal(map[string]string{"run": "default", "experiment": "spade", "mlflow_tracking_uri": mlflowURL,
		"wandb_dir": wandbDir, "tensorboard_dir": tbDir, "track_helper": helper})
	require.NoError(t, err)
	reqFile, resFile := filepath.Join(o.dir, "read_back.json"), filepath.Join(o.dir, "read_back.out.json")
	require.NoError(t, os.WriteFile(reqFile, req, 0o644))
	cmd := exec.Command(py, "testdata/trackers/read_back.py", reqFile, resFile)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	var got map[string]map[string][][2]float64
	b, err = os.ReadFile(resFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &got))

	st := openStore(t, o.store)
	want := map[string][][2]float64{}
	for rnd := 1; rnd <= 3; rnd++ {
		m, err := track.Metrics(context.Background(), st, "default", rnd)
		require.NoError(t, err)
		require.NotEmpty(t, m)
		require.Contains(t, m, "metrics/plays")
		require.Contains(t, m, "train/trained")
		m[track.Marker] = float64(rnd)
		for k, v := range m {
			want[k] = append(want[k], [2]float64{float64(rnd), v})
		}
	}
	for _, name := range []string{"mlflow", "wandb", "tensorboard"} {
		t.Run(name, func(t *testing.T) {
			have := got[name]
			require.Len(t, have, len(want), "%s keys", name)
			for k, pts := range want {
				require.Len(t, have[k], len(pts), "%s %s: one point per round, each logged once: %v", name, k, have[k])
				for i, p := range pts {
					g := have[k][i]
					require.Equal(t, p[0], g[0], "%s %s step", name, k)
					if name == "tensorboard" { // simple_value is a float32
						require.Equal(t, float64(float32(p[1])), g[1], "%s %s at round %v", name, k, p[0])
					} else {
						require.False(t, math.IsNaN(g[1]))
						require.Equal(t, p[1], g[1], "%s %s at round %v", name, k, p[0])
					}
				}
			}
		})
	}
}
