// Package track logs each sealed round of a run to the experiment trackers
// of observe.trackers (MLflow, Weights & Biases, TensorBoard) through each
// tracker's own Python client, once per round (docs/operations.md
// "Experiment trackers"). It is not a pipeline stage: it writes no table
// and changes no digest; `spade round` calls it after each seal and
// `spade track` on demand.
package track

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spade-pipeline/spade/engines/pyhelper"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

//go:embed spade_track.py
var helper []byte

// Marker is the metric every tracker gets at step R with value R when
// round R is logged; its presence at step R is what makes a later call
// skip the round.
const Marker = "spade/round"

// Metrics returns the tracker metrics of sealed round r of run: each row
// of the round's metrics table as "metrics/NAME" (a per-skill row as
// "metrics/NAME/SKILL"), and each row of its train_metrics table as
// "train/NAME" (trainer step 0, the batch-level numbers) or
// "train/NAME/step_S" (inner step S >= 1). Values are the tables' own.
// Errors: pipeline.ErrNotCommitted when the round is not sealed; the
// store's or a manifest's read error; a key that two rows share.
func Metrics(ctx context.Context, st storage.Store, run string, r int) (map[string]float64, error) {
	seal, err := pipeline.ReadSeal(ctx, st, run, r)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	put := func(key string, v float64) error {
		if _, dup := out[key]; dup {
			return fmt.Errorf("round %d of run %s: tracker metric %s from two rows", r, run, key)
		}
		out[key] = v
		return nil
	}
	if key, ok := seal.Manifests["metrics"]; ok {
		m, err := pipeline.ReadManifest(ctx, st, key)
		if err != nil {
			return nil, err
		}
		rows, err := pipeline.ReadManifestRows(ctx, st, schemas.Metrics, m)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			k := "metrics/" + row.Name
			if row.Skill != "" {
				k += "/" + row.Skill
			}
			if err := put(k, row.Value); err != nil {
				return nil, err
			}
		}
	}
	if key, ok := seal.Manifests["train_metrics"]; ok {
		m, err := pipeline.ReadManifest(ctx, st, key)
		if err != nil {
			return nil, err
		}
		rows, err := pipeline.ReadManifestRows(ctx, st, schemas.TrainMetrics, m)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			k := "train/" + row.Name
			if row.Step > 0 {
				k += fmt.Sprintf("/step_%d", row.Step)
			}
			if err := put(k, row.Value); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// request is the helper's stdin (spade_track.py's docstring).
type request struct {
	Run               string             `json:"run"`
	Round             int                `json:"round"`
	Trackers          []string           `json:"trackers"`
	Experiment        string             `json:"experiment"`
	ConfigDigest      string             `json:"config_digest"`
	MLflowTrackingURI string             `json:"mlflow_tracking_uri"`
	WandbMode         string             `json:"wandb_mode"`
	WandbDir          string             `json:"wandb_dir"`
	TensorBoardDir    string             `json:"tensorboard_dir"`
	Metrics           map[string]float64 `json:"metrics"`
}

// LogRound logs sealed round r (>= 1) of run to every tracker of
// o.Trackers (the run's observe.* settings; configDigest is the run's
// config digest, logged as a parameter) and returns, per tracker, "logged" or "already
// logged" (the tracker's own record of the round's Marker step, read back
// before writing, so a resumed or repeated call logs a round once). With
// no trackers it does nothing. The helper runs with o.Python;
// relative directories (wandb_dir, tensorboard_dir) are resolved against
// the working directory. Errors: those of Metrics; the helper's failure,
// naming the interpreter and carrying its stderr.
func LogRound(ctx context.Context, st storage.Store, run string, r int, o config.Observe, configDigest string) (map[string]string, error) {
	if len(o.Trackers) == 0 || r < 1 {
		return nil, nil
	}
	metrics, err := Metrics(ctx, st, run, r)
	if err != nil {
		return nil, err
	}
	req := request{Run: run, Round: r, Trackers: o.Trackers, Experiment: o.Experiment, ConfigDigest: configDigest,
		MLflowTrackingURI: o.MLflowTrackingURI, WandbMode: o.WandbMode, WandbDir: o.WandbDir, TensorBoardDir: o.TensorBoardDir, Metrics: metrics}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	stdout, err := pyhelper.Run(ctx, pyhelper.Script{Name: "spade_track.py", Source: helper}, pyhelper.Call{
		Python: o.Python, Setting: "observe.python", Stdin: in, StderrTail: 3000,
		Env: []string{"WANDB_SILENT=true", "MLFLOW_ENABLE_ASYNC_LOGGING=false"},
	})
	var pe *pyhelper.Error
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("trackers %s, round %d of run %s: %s spade_track.py: %w%s: %s", strings.Join(o.Trackers, ", "), r, run, o.Python, pe.Err, pe.Hint, pe.Stderr)
	}
	if err != nil {
		return nil, err
	}
	var res map[string]string
	if err := json.Unmarshal(stdout, &res); err != nil {
		return nil, fmt.Errorf("trackers, round %d of run %s: %s spade_track.py: reply is not JSON (%w): %.500s", r, run, o.Python, err, stdout)
	}
	return res, nil
}
