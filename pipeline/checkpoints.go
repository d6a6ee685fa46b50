package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// ErrRemovedByGC marks a read of a checkpoint file that `spade gc` removed
// by a retention rule (--keep-checkpoints, grpo.keep_optimizer_rounds):
// the file is gone on purpose, the round's tables are intact, and the
// error says which rule removed it and when (docs/operations.md,
// "Checkpoint retention").
var ErrRemovedByGC = errors.New("removed by spade gc")

// CheckpointRemoval is the marker gc writes into a round's checkpoints
// table directory, <run>/round=NNNNNN/checkpoints/_REMOVED.json, before it
// deletes any of that round's checkpoint files, so that a later read names
// the removal instead of failing as a missing file. One marker per round;
// a later removal (the weights after the optimizer state) rewrites it with
// both.
type CheckpointRemoval struct {
	// CheckpointID is the round's checkpoint (checkpoints.checkpoint_id).
	CheckpointID string `json:"checkpoint_id"`
	// Weights is true once the servable weights (every file outside
	// optimizer/) were removed, by the rule in WeightsRule.
	Weights bool `json:"weights,omitempty"`
	// WeightsRule is the --keep-checkpoints rule that removed them.
	WeightsRule string `json:"weights_rule,omitempty"`
	// Optimizer is true once the optimizer state (optimizer/) was removed.
	Optimizer bool `json:"optimizer,omitempty"`
	// OptimizerRule says why, e.g. "grpo.keep_optimizer_rounds = 1".
	OptimizerRule string `json:"optimizer_rule,omitempty"`
	// Time is when gc decided, RFC 3339 UTC.
	Time string `json:"time"`
	// Keys lists the removed files' store keys, sorted.
	Keys []string `json:"keys"`
}

// RemovalKey returns the removal marker's key for a checkpoint file key
// <run>/round=NNNNNN/checkpoints/files/<id>/<name>:
// <run>/round=NNNNNN/checkpoints/_REMOVED.json; "" for a key of another
// shape.
func RemovalKey(fileKey string) string {
	dir, _, ok := strings.Cut(fileKey, "/checkpoints/files/")
	if !ok || !strings.Contains(dir, "/round=") {
		return ""
	}
	return dir + "/checkpoints/_REMOVED.json"
}

// ReadRemoval reads the removal marker at key. It returns nil and no error
// when there is none. Errors: the store's, or a marker that is not JSON
// (wrapping ErrIntegrity, naming the key).
func ReadRemoval(ctx context.Context, s storage.Store, key string) (*CheckpointRemoval, error) {
	data, err := storage.ReadAll(ctx, s, key)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m CheckpointRemoval
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: not a checkpoint removal marker: %v", key, ErrIntegrity, err)
	}
	return &m, nil
}

// ReadCheckpointFile is ReadVerified for a file of a checkpoint (the
// grpo stage's input, a checkpoint materialised for serving): a file that
// is missing and that the round's removal marker lists is an error
// wrapping ErrRemovedByGC that names the file, the checkpoint, the rule
// and the time, instead of ErrIntegrity. Other errors are ReadVerified's.
func ReadCheckpointFile(ctx context.Context, s storage.Store, f FileEntry) ([]byte, error) {
	data, err := ReadVerified(ctx, s, f)
	if err == nil {
		return data, nil
	}
	if _, serr := s.Stat(ctx, f.Key); !isNotFound(serr) {
		return nil, err
	}
	key := RemovalKey(f.Key)
	if key == "" {
		return nil, err
	}
	m, merr := ReadRemoval(ctx, s, key)
	if merr != nil || m == nil {
		return nil, err
	}
	for _, k := range m.Keys {
		if k != f.Key {
			continue
		}
		rule := m.WeightsRule
		what := "weights"
		if strings.Contains(f.Key, "/optimizer/") {
			rule, what = m.OptimizerRule, "optimizer state"
		}
		return nil, fmt.Errorf("%s: %w (the %s of checkpoint %s, rule %q, at %s; marker %s): the round's tables are intact, but this checkpoint can no longer be served or trained from",
			f.Key, ErrRemovedByGC, what, m.CheckpointID, rule, m.Time, key)
	}
	return nil, err
}
