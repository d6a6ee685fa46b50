package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// isExists reports whether err is a put-if-absent that found the key
// taken (storage.ErrExists).
func isExists(err error) bool { return errors.Is(err, storage.ErrExists) }

// isNotFound reports whether err is a missing object (storage.ErrNotFound).
func isNotFound(err error) bool { return errors.Is(err, storage.ErrNotFound) }

// Runner executes stages of one run against one store.
type Runner struct {
	// Store holds the run's data.
	Store storage.Store
	// Run is the run's name (ValidateRunName).
	Run string
	// Config is the run's config; its digest must match the one pinned in
	// _RUN.json (EnsureRun).
	Config config.Config
	// Stages in registration order; the runner orders them by their table
	// dependencies (PlanRound).
	Stages []Stage
	// Log receives progress and warnings; nil means slog.Default().
	Log *slog.Logger
	// Progress, when set, is told about each stage's parts.
	Progress ProgressFunc
	// Now returns the time for created_at fields (observations only).
	Now func() time.Time
	// Fence, when set, is called right before each commit write (a
	// table's manifest, a round's seal); its error stops the commit and is
	// returned. `spade round next` sets it to HeldLease.Check, so that an
	// invocation that lost the run's lease commits nothing more.
	Fence func(ctx context.Context) error

	// writer is the writer registration (RegisterWriter) of the call in
	// progress: taken right before its first write to the store, so that
	// no spade gc of the run deletes while it writes, and released when the
	// call returns. A call that writes nothing (a sealed round, a
	// committed stage) takes none, so it works on a read-only store.
	writer *HeldLease

	// pinned is the config digest this runner has seen the run's
	// _RUN.json pin (read, or created by claimRun); while Config still
	// has that digest, commits skip the check. A Runner is not for
	// concurrent use.
	pinned string
}

// fence runs before a commit write of key: it registers the call as a
// writer of the run if it is not yet (beginWrite), checks that the
// registration is still there (a spade gc removes one it finds stale),
// then runs r.Fence when set.
func (r *Runner) fence(ctx context.Context, key string) error {
	if err := r.beginWrite(ctx); err != nil {
		return err
	}
	if err := r.writer.Check(ctx); err != nil {
		return fmt.Errorf("not committing %s: %w", key, err)
	}
	if r.Fence == nil {
		return nil
	}
	if err := r.Fence(ctx); err != nil {
		return fmt.Errorf("not committing %s: %w", key, err)
	}
	return nil
}

// beginWrite registers the call in progress as a writer of the run
// (RegisterWriter: it waits while a spade gc holds the run) unless it is
// already registered.
func (r *Runner) beginWrite(ctx context.Context) error {
	if r.writer != nil {
		return nil
	}
	w, err := RegisterWriter(ctx, r.Store, r.Run, r.log())
	if err != nil {
		return err
	}
	r.writer = w
	return nil
}

// endWrite releases the writer registration of the call that returns.
func (r *Runner) endWrite() {
	if r.writer != nil {
		r.writer.Release()
		r.writer = nil
	}
}

// ProgressFunc reports progress of a stage: done of total parts.
type ProgressFunc func(stage string, done, total int)

// now is r.Now() in UTC, or the wall clock when Now is nil.
func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

// log is r.Log, or slog.Default() when nil.
func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// workers is the config's workers setting, or the CPU count when it is 0.
func (r *Runner) workers() int {
	if r.Config.Workers > 0 {
		return r.Config.Workers
	}
	return runtime.NumCPU()
}

// StageByName returns the registered stage called name, or an error
// quoting name and listing the registered stages' names.
func (r *Runner) StageByName(name string) (Stage, error) {
	var names []string
	for _, s := range r.Stages {
		if s.Name() == name {
			return s, nil
		}
		names = append(names, s.Name())
	}
	return nil, fmt.Errorf("unknown stage %q (stages: %s)", name, strings.Join(names, ", "))
}

// TableManifests returns the committed manifests of round r, by table name,
// by trying every known stage output (readers never list directories). A
// table with no manifest is left out. It does not read the seal, so the
// manifests are not checked against the content digests it records. The
// first other error stops it: ReadManifest's (the store's error wrapped
// as "read manifest <key>", ctx.Err() included, or DecodeManifest's,
// ErrUnknownVersion among them).
func (r *Runner) TableManifests(ctx context.Context, round int) (map[string]*Manifest, error) {
	out := map[string]*Manifest{}
	for _, s := range r.Stages {
		for _, o := range s.Outputs() {
			m, err := ReadManifest(ctx, r.Store, ManifestKey(r.Run, round, o.Table))
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[o.Table] = m
		}
	}
	return out, nil
}
