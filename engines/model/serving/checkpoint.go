package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// completeFile marks a materialised checkpoint directory as whole; it
// lists the files and their sha256 as the checkpoints row has them.
const completeFile = ".spade-checkpoint.json"

// Materialize makes checkpoint ck (a checkpoints row with files in the
// store) a local directory cache/<checkpoint_id> and returns its path.
// Only the servable files are copied: the optimizer state (optimizer/,
// 12 bytes per parameter, 98 GB for an 8B model) is the trainer's and no
// server reads it. Each file is read from the store and checked against the row's size
// and sha256 (pipeline.ReadVerified), written into a temporary directory
// beside it, fsynced, and the directory renamed into place, so a crash
// leaves no half-written checkpoint under the id. A directory already
// there is reused when its marker lists the row's files and digests and
// every file has the listed size; otherwise it is replaced. Errors: an
// unsafe file name or id (naming the checkpoint), the store's (wrapped by
// pipeline.ReadCheckpointFile: ErrIntegrity for a damaged file,
// ErrRemovedByGC for weights `spade gc --keep-checkpoints` removed), and
// the file system's.
func Materialize(ctx context.Context, st storage.Store, ck schemas.Checkpoint, cache string) (string, error) {
	var servable []schemas.CheckpointFile
	for _, f := range ck.Files {
		if !strings.HasPrefix(f.Name, "optimizer/") {
			servable = append(servable, f)
		}
	}
	ck.Files = servable
	if len(ck.Files) == 0 {
		return "", fmt.Errorf("checkpoint %s has no files in the store", ck.CheckpointID)
	}
	if ck.CheckpointID == "" || filepath.Base(ck.CheckpointID) != ck.CheckpointID || ck.CheckpointID[0] == '.' {
		return "", fmt.Errorf("checkpoint id %q cannot name a cache directory", ck.CheckpointID)
	}
	paths := make([]string, len(ck.Files))
	for i, f := range ck.Files {
		rel, err := filepath.Localize(f.Name)
		if err == nil && (rel == "." || rel == completeFile) {
			err = errors.New("reserved name")
		}
		if err != nil || slices.Contains(paths[:i], rel) {
			return "", fmt.Errorf("checkpoint %s: file name %q: want a clean relative path inside the checkpoint, listed once", ck.CheckpointID, f.Name)
		}
		paths[i] = rel
	}
	dir := filepath.Join(cache, ck.CheckpointID)
	want, _ := json.Marshal(ck.Files)
	if have, err := os.ReadFile(filepath.Join(dir, completeFile)); err == nil && string(have) == string(want) && sizesMatch(dir, paths, ck.Files) {
		return dir, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("model.checkpoint_cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, ".tmp-"+ck.CheckpointID+"-")
	if err != nil {
		return "", fmt.Errorf("model.checkpoint_cache: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	for i, f := range ck.Files {
		data, err := pipeline.ReadCheckpointFile(ctx, st, pipeline.FileEntry{Key: f.Key, SHA256: f.SHA256, Bytes: f.Bytes})
		if err != nil {
			return "", fmt.Errorf("checkpoint %s: %w", ck.CheckpointID, err)
		}
		p := filepath.Join(tmp, paths[i])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := writeSynced(p, data); err != nil {
			return "", err
		}
	}
	if err := writeSynced(filepath.Join(tmp, completeFile), want); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	// A stale or partial directory under the id (another marker, a file
	// cut short) is replaced; rename does not replace a non-empty one.
	if _, err := os.Stat(dir); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return "", fmt.Errorf("replace cached checkpoint %s: %w", dir, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("install cached checkpoint %s: %w", dir, err)
	}
	if d, err := os.Open(cache); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return dir, nil
}

func sizesMatch(dir string, paths []string, files []schemas.CheckpointFile) bool {
	for i, f := range files {
		fi, err := os.Stat(filepath.Join(dir, paths[i]))
		if err != nil || fi.Size() != f.Bytes {
			return false
		}
	}
	return true
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
