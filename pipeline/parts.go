package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Shard selects the parts p with p % Count == Index.
type Shard struct {
	// Index is this shard's number, 0 <= Index < Count; Count is the number
	// of shards (>= 1; 1 runs every part).
	Index, Count int
}

// ParseShard parses "i/n" (0 <= i < n). Any other text, including one
// with a sign, leading zeros, spaces or trailing characters (the parsed
// shard must print back as s), is an error quoting s; the Shard returned
// with the error holds whatever was parsed and is not meaningful.
func ParseShard(s string) (Shard, error) {
	var sh Shard
	if _, err := fmt.Sscanf(s, "%d/%d", &sh.Index, &sh.Count); err != nil || sh.Count < 1 || sh.Index < 0 || sh.Index >= sh.Count || fmt.Sprintf("%d/%d", sh.Index, sh.Count) != s {
		return sh, fmt.Errorf("invalid shard %q: want i/n with 0 <= i < n, e.g. 2/8", s)
	}
	return sh, nil
}

// partRecord is the JSON of one part's _pending record (PendingKey): the
// files the part wrote per output table, the input manifests it
// references instead (Out.Reference) and its stats. commit builds the
// manifests from the records of every part.
type partRecord struct {
	FormatVersion int                  `json:"format_version"`
	Stage         string               `json:"stage"`
	Fingerprint   string               `json:"fingerprint"`
	Part          int                  `json:"part"`
	Parts         int                  `json:"parts"`
	Files         map[string]FileEntry `json:"files"`
	Refs          map[string]string    `json:"refs,omitempty"`
	Stats         map[string]any       `json:"stats,omitempty"`
}

// runStage runs the parts of shard that have no usable part record, with
// the stage's server up while they run (Serving), and commits the stage
// when commit is true. It returns false when the stage was already
// committed with this fingerprint; errors are those of prepare, the
// stage, the store and commit.
func (r *Runner) runStage(ctx context.Context, ri RoundInfo, s Stage, shard Shard, commit bool) (bool, error) {
	start := time.Now()
	env, fp, done, err := r.prepare(ctx, ri, s)
	if err != nil {
		return false, err
	}
	if done {
		r.log().Info("stage already committed", "round", ri.Round, "stage", s.Name())
		return false, nil
	}
	parts, err := s.Parts(ctx, env)
	if err != nil {
		return false, fmt.Errorf("plan parts: %w", err)
	}
	if parts < 1 {
		return false, fmt.Errorf("stage %s returned %d parts", s.Name(), parts)
	}
	// Registered before the parts are checked: from then on no gc of the
	// run deletes a part file that this call finds whole and keeps.
	if err := r.beginWrite(ctx); err != nil {
		return false, err
	}
	todo, err := r.partsToDo(ctx, ri, s, fp, shard, parts)
	if err != nil {
		return false, err
	}
	r.log().Info("stage start", "round", ri.Round, "stage", s.Name(), "parts", parts, "todo", len(todo), "shard", fmt.Sprintf("%d/%d", shard.Index, shard.Count))
	if sv, ok := s.(Serving); ok && len(todo) > 0 {
		stop, err := sv.Serve(ctx, env)
		if err != nil {
			return false, fmt.Errorf("serve the round's policy: %w", err)
		}
		defer stop()
	}
	var finished atomic.Int64
	if r.Progress != nil {
		r.Progress(s.Name(), 0, len(todo))
	}
	atOnce := r.workers()
	if pf, ok := s.(PartsInFlight); ok {
		atOnce = max(atOnce, pf.PartsInFlight(&r.Config))
	}
	wp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(1, min(atOnce, len(todo))))
	for _, p := range todo {
		wp.Go(func(ctx context.Context) error {
			if err := r.runPart(ctx, env, s, fp, p, parts); err != nil {
				return fmt.Errorf("part %d of %d: %w", p, parts, err)
			}
			n := finished.Add(1)
			if r.Progress != nil {
				r.Progress(s.Name(), int(n), len(todo))
			}
			return nil
		})
	}
	if err := wp.Wait(); err != nil {
		return false, err
	}
	if !commit {
		return true, nil
	}
	wrote, err := r.commit(ctx, ri, s, env, fp, parts, time.Since(start), false)
	if err != nil {
		return false, err
	}
	if wrote == 0 {
		// Every manifest was already there, with this fingerprint: another
		// invocation committed the same stage first (identical content).
		r.log().Info("stage already committed by another invocation", "round", ri.Round, "stage", s.Name(), "seconds", time.Since(start).Seconds())
		return true, nil
	}
	r.log().Info("stage committed", "round", ri.Round, "stage", s.Name(), "seconds", time.Since(start).Seconds())
	return true, nil
}

// partsToDo returns the parts of shard that have no usable part record.
// A part whose record an earlier, interrupted invocation wrote is done
// when the record decodes as this part's and every file it lists is
// whole (size and sha256): a record, or a file it lists, that was damaged
// or deleted since (bit rot, a hand edit, a clean-up) would otherwise be
// committed into a manifest that no reader accepts and no rerun can
// replace. Such a part is run again (logged as a warning), which rewrites
// its files and record.
func (r *Runner) partsToDo(ctx context.Context, ri RoundInfo, s Stage, fp string, shard Shard, parts int) ([]int, error) {
	var candidates []int
	for p := shard.Index; p < parts; p += shard.Count {
		candidates = append(candidates, p)
	}
	redo := make([]bool, len(candidates))
	wp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(1, min(r.workers(), len(candidates))))
	for i, p := range candidates {
		wp.Go(func(ctx context.Context) error {
			why, err := r.checkPartRecord(ctx, ri, s, fp, p, parts)
			if err != nil {
				return err
			}
			if why != "" {
				redo[i] = true
				if why != noPartRecord {
					r.log().Warn("part written by an earlier invocation is damaged; running it again", "round", ri.Round, "stage", s.Name(), "part", p, "why", why)
				}
			}
			return nil
		})
	}
	if err := wp.Wait(); err != nil {
		return nil, err
	}
	var todo []int
	for i, p := range candidates {
		if redo[i] {
			todo = append(todo, p)
		}
	}
	return todo, nil
}

// noPartRecord is checkPartRecord's reason for a part not written yet.
const noPartRecord = "no part record"

// checkPartRecord says why part p must run ("" when its record and files
// are whole). Errors: the store's, other than a missing object.
func (r *Runner) checkPartRecord(ctx context.Context, ri RoundInfo, s Stage, fp string, p, parts int) (string, error) {
	key := PendingKey(r.Run, ri.Round, s.Name(), fp, p)
	data, err := storage.ReadAll(ctx, r.Store, key)
	if isNotFound(err) {
		return noPartRecord, nil
	}
	if err != nil {
		return "", err
	}
	var rec partRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Sprintf("%s: malformed part record: %v", key, err), nil
	}
	if rec.Stage != s.Name() || rec.Fingerprint != fp || rec.Part != p || rec.Parts != parts {
		return fmt.Sprintf("%s: part record of stage %s part %d of %d (fingerprint %s), want %s part %d of %d (%s)", key, rec.Stage, rec.Part, rec.Parts, short(rec.Fingerprint), s.Name(), p, parts, short(fp)), nil
	}
	for _, name := range sortedKeys(rec.Files) {
		if _, err := ReadVerified(ctx, r.Store, rec.Files[name]); err != nil {
			if errors.Is(err, ErrIntegrity) || isNotFound(err) {
				return err.Error(), nil
			}
			return "", err
		}
	}
	return "", nil
}

// runPart runs part p of parts of s, writes its files (putFile) and then
// its part record; the record is written last, so a part is done only
// once every file it lists is whole.
func (r *Runner) runPart(ctx context.Context, env *Env, s Stage, fp string, p, parts int) error {
	out := newOut(s.Outputs())
	if err := s.Run(ctx, env, p, out); err != nil {
		return err
	}
	rec := partRecord{FormatVersion: FormatVersion, Stage: s.Name(), Fingerprint: fp, Part: p, Parts: parts, Files: map[string]FileEntry{}, Refs: map[string]string{}, Stats: out.stats}
	for _, name := range sortedKeys(out.tables) {
		enc := out.tables[name]
		if enc.len() == 0 {
			continue
		}
		data, rows, groups, err := enc.encode()
		if err != nil {
			return err
		}
		fe, err := putFile(ctx, r.Store, r.Run, env.Round.Round, name, p, parts, data, rows, groups)
		if err != nil {
			return err
		}
		rec.Files[name] = fe
	}
	for name, m := range out.refs {
		if parts != 1 {
			return fmt.Errorf("stage %s: Reference needs a single part", s.Name())
		}
		rec.Refs[name] = ManifestKey(m.Run, m.Round, m.Table)
	}
	b, _ := json.Marshal(rec)
	return storage.PutBytes(ctx, r.Store, PendingKey(r.Run, env.Round.Round, s.Name(), fp, p), b)
}
