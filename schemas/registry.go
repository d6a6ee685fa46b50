package schemas

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Info describes a table kind independently of its row type: what the
// runner, spade status, spade sql and spade diff need.
type Info struct {
	// Name is the table name, e.g. "rollouts"; also its directory name.
	Name string
	// Version is the schema version; it changes with any column change.
	Version int
	// Key lists the columns that identify a row, in sort order.
	Key []string
	// Schema is the Parquet schema derived from the row type's tags.
	Schema *parquet.Schema
	// RowType is the Go row type.
	RowType reflect.Type
}

// Fingerprint is the hex sha256 of the table name, version and Parquet
// schema text: two tables with equal fingerprints have identical layouts.
func (i Info) Fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s", i.Name, i.Version, i.Schema.String())
	return hex.EncodeToString(h.Sum(nil))
}

// Table is a typed table kind: Info plus the row order.
type Table[T any] struct {
	Info
	// Compare orders rows by Key; rows are written in this order.
	Compare func(a, b *T) int
}

var registry = map[string]Info{}

func define[T any](name string, version int, key []string, compare func(a, b *T) int) Table[T] {
	var zero T
	t := Table[T]{Info: Info{Name: name, Version: version, Key: key, Schema: parquet.SchemaOf(zero), RowType: reflect.TypeOf(zero)}, Compare: compare}
	if _, dup := registry[name]; dup {
		panic("schemas: duplicate table " + name)
	}
	registry[name] = t.Info
	return t
}

// Lookup returns the Info of a table by name; ok is false for an unknown name.
func Lookup(name string) (Info, bool) {
	i, ok := registry[name]
	return i, ok
}

// All returns every table's Info sorted by name.
func All() []Info {
	out := make([]Info, 0, len(registry))
	for _, i := range registry {
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Names returns every table name, sorted.
func Names() []string {
	var out []string
	for _, i := range All() {
		out = append(out, i.Name)
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The table kinds. Versions start at 1; bump on any column change.
var (
	Corpus  = define("corpus", 1, []string{"doc_id"}, func(a, b *CorpusDoc) int { return strings.Compare(a.DocID, b.DocID) })
	Slots   = define("slots", 1, []string{"slot_id"}, func(a, b *Slot) int { return strings.Compare(a.SlotID, b.SlotID) })
	Designs = define("designs", 3, []string{"slot_id", "attempt"}, func(a, b *Design) int {
		return cmp.Or(strings.Compare(a.SlotID, b.SlotID), cmp.Compare(a.Attempt, b.Attempt))
	})
	Validations = define("validations", 2, []string{"env_id", "seq"}, func(a, b *Validation) int {
		return cmp.Or(strings.Compare(a.EnvID, b.EnvID), cmp.Compare(a.Seq, b.Seq))
	})
	Environments = define("environments", 1, []string{"env_id"}, func(a, b *Environment) int { return strings.Compare(a.EnvID, b.EnvID) })
	Hints        = define("hints", 2, []string{"env_id"}, func(a, b *Hint) int { return strings.Compare(a.EnvID, b.EnvID) })
	Rollouts     = define("rollouts", 3, []string{"env_id", "hinted", "sample"}, func(a, b *Rollout) int {
		return cmp.Or(strings.Compare(a.EnvID, b.EnvID), cmp.Compare(boolInt(a.Hinted), boolInt(b.Hinted)), cmp.Compare(a.Sample, b.Sample))
	})
	Labels       = define("labels", 1, []string{"env_id"}, func(a, b *Label) int { return strings.Compare(a.EnvID, b.EnvID) })
	Memory       = define("memory", 1, []string{"seq"}, func(a, b *MemoryEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	Pool         = define("pool", 1, []string{"env_id"}, func(a, b *PoolEnv) int { return strings.Compare(a.EnvID, b.EnvID) })
	TrainBatch   = define("train_batch", 3, []string{"sample_id"}, func(a, b *TrainSample) int { return strings.Compare(a.SampleID, b.SampleID) })
	TrainMetrics = define("train_metrics", 1, []string{"step", "name"}, func(a, b *TrainMetric) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), strings.Compare(a.Name, b.Name))
	})
	Checkpoints = define("checkpoints", 1, []string{"checkpoint_id"}, func(a, b *Checkpoint) int { return strings.Compare(a.CheckpointID, b.CheckpointID) })
	Metrics     = define("metrics", 1, []string{"name", "skill"}, func(a, b *Metric) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Skill, b.Skill))
	})
	Evals = define("evals", 1, []string{"suite", "task", "metric"}, func(a, b *Eval) int {
		return cmp.Or(strings.Compare(a.Suite, b.Suite), strings.Compare(a.Task, b.Task), strings.Compare(a.Metric, b.Metric))
	})
	LLMCalls = define("llm_calls", 2, []string{"request_hash", "occurrence"}, func(a, b *LLMCall) int {
		return cmp.Or(strings.Compare(a.RequestHash, b.RequestHash), cmp.Compare(a.Occurrence, b.Occurrence))
	})
)
