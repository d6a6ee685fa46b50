package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// commit writes the manifests of s at round ri from its part records and
// returns how many this call wrote; a manifest already committed with the
// same fingerprint (by a concurrent invocation) is kept and not counted.
//
// verify checks each part file's size and sha256 before anything is
// committed (spade commit, whose parts other invocations wrote); without
// it each file's size is checked (runStage, which verified or wrote every
// part itself).
func (r *Runner) commit(ctx context.Context, ri RoundInfo, s Stage, env *Env, fp string, parts int, took time.Duration, verify bool) (int, error) {
	// Registered before the part files are checked: from then on no gc
	// of the run deletes one of them.
	if err := r.beginWrite(ctx); err != nil {
		return 0, err
	}
	recs := make([]partRecord, parts)
	wrote := 0
	var missing []string
	for p := 0; p < parts; p++ {
		key := PendingKey(r.Run, ri.Round, s.Name(), fp, p)
		data, err := storage.ReadAll(ctx, r.Store, key)
		if isNotFound(err) {
			missing = append(missing, fmt.Sprint(p))
			continue
		}
		if err != nil {
			return 0, err
		}
		if err := json.Unmarshal(data, &recs[p]); err != nil {
			return 0, fmt.Errorf("%s: malformed part record: %w; run the shard that writes part %d again, then spade commit", key, err, p)
		}
	}
	if len(missing) > 0 {
		// A concurrent invocation of the same round may have committed
		// the stage, sealed the round and removed the part records this
		// one skipped: then there is nothing left to commit.
		if done, err := r.committedWith(ctx, ri, s, fp); err != nil || done {
			return 0, err
		}
		return 0, fmt.Errorf("stage %s round %d: %d of %d parts missing (parts %s); run the missing shards, then spade commit", s.Name(), ri.Round, len(missing), parts, strings.Join(missing, ","))
	}
	if err := r.checkPartFiles(ctx, s, recs, verify); err != nil {
		return 0, err
	}
	for _, o := range s.Outputs() {
		info, ok := schemas.Lookup(o.KindOf())
		if !ok {
			return 0, fmt.Errorf("stage %s: output %s has unknown kind %s", s.Name(), o.Table, o.KindOf())
		}
		m := &Manifest{
			FormatVersion: FormatVersion, Run: r.Run, Round: ri.Round, Table: o.Table, Kind: info.Name,
			SchemaVersion: info.Version, SchemaFingerprint: info.Fingerprint(),
			Stage: s.Name(), StageFingerprint: fp, ConfigDigest: r.Config.Digest(), Seed: r.Config.Seed,
			Inputs: env.inputRefs, CodeVersion: CodeVersion(), Libraries: Libraries(), CreatedAt: r.now(),
			Files: []FileEntry{},
			Stats: map[string]any{"stage_seconds": took.Seconds(), "parts": parts},
		}
		for p := range recs {
			if refKey, ok := recs[p].Refs[o.Table]; ok {
				src, err := ReadManifest(ctx, r.Store, refKey)
				if err != nil {
					return 0, err
				}
				m.Files = append(m.Files, src.Files...)
				m.ReferenceOf = refKey
			}
			if fe, ok := recs[p].Files[o.Table]; ok {
				m.Files = append(m.Files, fe)
			}
			for k, v := range recs[p].Stats {
				m.Stats[k] = v
			}
		}
		for _, f := range m.Files {
			m.Rows += f.Rows
			m.Bytes += f.Bytes
		}
		key := ManifestKey(r.Run, ri.Round, o.Table)
		if err := r.fence(ctx, key); err != nil {
			return 0, err
		}
		if err := r.claimRun(ctx); err != nil {
			return 0, err
		}
		err := storage.PutBytesIfAbsent(ctx, r.Store, key, m.Encode())
		if isExists(err) {
			have, rerr := ReadManifest(ctx, r.Store, key)
			if rerr != nil {
				return 0, rerr
			}
			if have.StageFingerprint != fp {
				return 0, fmt.Errorf("%s committed concurrently with another fingerprint: %w", key, ErrConflict)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("commit %s: %w", key, err)
		}
		wrote++
	}
	return wrote, nil
}

// committedWith reports whether every output of s at round ri is
// committed with stage fingerprint fp.
func (r *Runner) committedWith(ctx context.Context, ri RoundInfo, s Stage, fp string) (bool, error) {
	for _, o := range s.Outputs() {
		m, err := ReadManifest(ctx, r.Store, ManifestKey(r.Run, ri.Round, o.Table))
		if isNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if m.StageFingerprint != fp {
			return false, nil
		}
	}
	return true, nil
}

// checkPartFiles checks that every file the part records list is whole:
// present with its recorded size, and with verify its sha256 too. A
// manifest naming a missing or damaged file could never be read or
// replaced, so the commit fails instead (ErrIntegrity), naming the file
// and the part to run again.
func (r *Runner) checkPartFiles(ctx context.Context, s Stage, recs []partRecord, verify bool) error {
	var files []FileEntry
	for p := range recs {
		for _, name := range sortedKeys(recs[p].Files) {
			files = append(files, recs[p].Files[name])
		}
	}
	wp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(1, min(r.workers(), len(files))))
	for _, f := range files {
		wp.Go(func(ctx context.Context) error {
			var err error
			if verify {
				_, err = ReadVerified(ctx, r.Store, f)
			} else {
				var info storage.Info
				info, err = r.Store.Stat(ctx, f.Key)
				if err == nil && info.Size != f.Bytes {
					err = fmt.Errorf("%s: %w: %d bytes, part record says %d", f.Key, ErrIntegrity, info.Size, f.Bytes)
				}
			}
			if isNotFound(err) {
				err = fmt.Errorf("%s: %w: file missing", f.Key, ErrIntegrity)
			}
			if err != nil {
				return fmt.Errorf("stage %s: part %d: %w; nothing was committed: run the stage (or the shard that writes part %d) again to rewrite it", s.Name(), f.Part, err, f.Part)
			}
			return nil
		})
	}
	return wp.Wait()
}
