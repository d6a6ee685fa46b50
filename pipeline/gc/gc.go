// Package gc removes data files no committed manifest references: part
// files left by failed or superseded stage attempts (a crash before commit,
// a code change that changed a stage fingerprint), part records
// (_pending) that can no longer be committed, and on the file store the
// temp files (on S3 the incomplete multipart uploads) of writes whose
// writer was killed. It is `spade gc`
// (docs/operations.md).
//
// Safety rules, in order:
//  1. Only two kinds of keys are ever candidates: part files
//     (<run>/round=NNNNNN/<table>/part-*.parquet) and part records
//     (<run>/round=NNNNNN/_pending/<stage>-<fp>/part-*.json), plus the
//     temp objects a storage.TempCollector lists (temp files, incomplete
//     multipart uploads), which no key names, under the directory of a
//     run that has a run file (an S3 prefix may hold other tools'
//     uploads).
//     Manifests, seals, run files, leases and stage artefacts (checkpoint
//     files) are never touched.
//  2. References are collected from every manifest of every run in the
//     store, whatever run is being collected, so files a fork (or any run)
//     lists in another run's directory stay.
//  3. A part record of a stage that is not wholly committed and not in a
//     sealed round is live: the files it names stay (a sharded stage
//     waiting for `spade commit`, or a stage whose commit was interrupted
//     between two of its tables' manifests). Only the records of a stage
//     whose every table is committed with the records' fingerprint, or
//     that is committed with another fingerprint, are stale.
//  4. Nothing younger than the grace period (storage.Info.ModTime) is
//     deleted: a part being written has no record yet. An object listed
//     without a modification time counts as young.
package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// DefaultGrace is the default grace period: longer than any stage part
// runs, so a file being written and not yet recorded is never deleted.
const DefaultGrace = 24 * time.Hour

// concurrency bounds parallel manifest reads and deletes (S3 latency).
const concurrency = 16

// Kind says what a garbage object is.
type Kind string

// Kinds of garbage.
const (
	// KindPart is a Parquet part file no manifest or live part record lists.
	KindPart Kind = "part"
	// KindPending is a part record of a stage that is committed or of a
	// sealed round: it can never be committed again.
	KindPending Kind = "pending"
	// KindTemp is what a write that never finished (its writer was
	// killed) left behind: a ".spade-tmp-*" file on the file store, an
	// incomplete multipart upload ("KEY?uploadId=ID") on S3. Never a key,
	// never read (stores that implement storage.TempCollector).
	KindTemp Kind = "temp"
)

// Options configures Collect.
type Options struct {
	// Run limits deletion to one run's keys; "" collects every run. The
	// references of every run are honoured either way.
	Run string
	// Grace: only garbage whose ModTime is at least this old is deleted.
	Grace time.Duration
	// DryRun lists the garbage and deletes nothing.
	DryRun bool
	// Now is the clock the grace period is measured against; nil means
	// time.Now.
	Now func() time.Time
}

// Object is one unreferenced object.
type Object struct {
	// Key is the object's store key.
	Key string `json:"key"`
	// Kind is KindPart, KindPending or KindTemp.
	Kind Kind `json:"kind"`
	// Bytes is the object's size in bytes, as the store listed it.
	Bytes int64 `json:"bytes"`
	// ModTime is the object's last-modified time, as the store listed it;
	// the grace period is measured from it.
	ModTime time.Time `json:"mod_time"`
	// Why explains why nothing needs the object.
	Why string `json:"why"`
	// WithinGrace marks garbage younger than the grace period, or listed
	// without a modification time (kept).
	WithinGrace bool `json:"within_grace,omitempty"`
	// Deleted is true when Collect removed the object.
	Deleted bool `json:"deleted,omitempty"`
}

// Result is what Collect found and did.
type Result struct {
	// Manifests is the number of manifests read (every run's).
	Manifests int `json:"manifests"`
	// Referenced is the number of distinct data keys that manifests and
	// live part records list.
	Referenced int `json:"referenced"`
	// Garbage lists every unreferenced candidate, sorted by key.
	Garbage []Object `json:"garbage"`
	// Deleted counts the objects removed (0 with DryRun).
	Deleted int `json:"deleted"`
	// DeletedBytes is the total size of the removed objects, in bytes.
	DeletedBytes int64 `json:"deleted_bytes"`
	// Warnings name objects gc could not read and so treated as live.
	Warnings []string `json:"warnings,omitempty"`
}

var (
	partRe     = regexp.MustCompile(`^([^/]+)/round=(\d{6})/([^/_][^/]*)/part-\d{5}-of-\d{5}-[0-9a-f]{16}\.parquet$`)
	pendingRe  = regexp.MustCompile(`^([^/]+)/round=(\d{6})/_pending/([^/]+)-([0-9a-f]{16})/part-\d{5}\.json$`)
	manifestRe = regexp.MustCompile(`^([^/]+)/round=(\d{6})/([^/_][^/]*)/_manifest\.json$`)
	sealRe     = regexp.MustCompile(`^([^/]+)/round=(\d{6})/_ROUND\.json$`)
	runFileRe  = regexp.MustCompile(`^([^/]+)/_RUN\.json$`)
)

// noRunError is Collect's error for a run with nothing in the store.
type noRunError struct{ run, store string }

// Error names the run and the store.
func (e noRunError) Error() string {
	return fmt.Sprintf("run %s does not exist in %s (no key under %s/)", e.run, e.store, e.run)
}

// Is makes errors.Is(err, pipeline.ErrNotCommitted) true.
func (e noRunError) Is(target error) bool { return target == pipeline.ErrNotCommitted }

// roundOf names one round of one run ("<run>/round=NNNNNN").
func roundOf(run, round string) string { return run + "/round=" + round }

// Collect finds the garbage of opts.Run (or of every run) in s and deletes
// what is older than opts.Grace unless opts.DryRun. It lists the store
// once and reads every manifest and part record. Errors: a store error,
// or a manifest that does not decode (ErrUnknownVersion, malformed JSON):
// gc refuses to guess what an unreadable manifest references. With
// opts.Run set, a run with no object at all under "<run>/" in the listing
// (a name typed wrong) is an error matching pipeline.ErrNotCommitted,
// "run X does not exist ...", as spade status says for a run without a
// run file; a run with part files but no run file yet (its first command
// failed before committing) is collected.
func Collect(ctx context.Context, s storage.Store, opts Options) (*Result, error) {
	if opts.Run != "" {
		if err := pipeline.ValidateRunName(opts.Run); err != nil {
			return nil, err
		}
	}
	if opts.Grace < 0 {
		return nil, fmt.Errorf("gc: grace period must be >= 0 (got %s)", opts.Grace)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	// One listing: a file committed later was recorded by a part record
	// before this listing, or is younger than the grace period.
	all, err := s.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("gc: list %s: %w", s.URL(), err)
	}
	if opts.Run != "" && !slices.ContainsFunc(all, func(in storage.Info) bool { return strings.HasPrefix(in.Key, opts.Run+"/") }) {
		return nil, noRunError{run: opts.Run, store: s.URL()}
	}
	sealed := map[string]bool{}
	runs := map[string]bool{} // runs with a run file
	var manifests []string
	for _, in := range all {
		if m := sealRe.FindStringSubmatch(in.Key); m != nil {
			sealed[roundOf(m[1], m[2])] = true
		}
		if m := runFileRe.FindStringSubmatch(in.Key); m != nil {
			runs[m[1]] = true
		}
		if manifestRe.MatchString(in.Key) {
			manifests = append(manifests, in.Key)
		}
	}
	res := &Result{Garbage: []Object{}}
	referenced := map[string]bool{}
	committed := map[string]map[string]bool{} // "<run>/round=NNNNNN stage" -> its committed fingerprints
	tables := map[string]bool{}               // "<run>/round=NNNNNN table" of every manifest
	var mu sync.Mutex
	wp := pool.New().WithContext(ctx).WithMaxGoroutines(concurrency).WithCancelOnError().WithFirstError()
	for _, key := range manifests {
		wp.Go(func(ctx context.Context) error {
			m, err := pipeline.ReadManifest(ctx, s, key)
			if errors.Is(err, storage.ErrNotFound) {
				return nil // removed since the listing: it references nothing now
			}
			if err != nil {
				return fmt.Errorf("gc: %w", err)
			}
			sm := manifestRe.FindStringSubmatch(key)
			mu.Lock()
			defer mu.Unlock()
			res.Manifests++
			rs := roundOf(sm[1], sm[2]) + " " + m.Stage
			if committed[rs] == nil {
				committed[rs] = map[string]bool{}
			}
			committed[rs][m.StageFingerprint] = true
			tables[roundOf(sm[1], sm[2])+" "+sm[3]] = true
			for _, f := range m.Files {
				referenced[f.Key] = true
			}
			return nil
		})
	}
	if err := wp.Wait(); err != nil {
		return nil, err
	}

	prefix := ""
	if opts.Run != "" {
		prefix = opts.Run + "/"
	}
	garbage := []Object{}           // [] not null in JSON
	unreadable := map[string]bool{} // rounds with a part record gc could not read
	// Part records of a stage committed with their own fingerprint are
	// judged per attempt ("<run>/round=NNNNNN stage fp"): the runner writes
	// a stage's manifests one table at a time, so a commit cut short (a
	// kill, a full disk) leaves some tables committed and the others still
	// needing every part record and the files they list.
	type attempt struct {
		round   string // "<run>/round=NNNNNN"
		stage   string
		records []storage.Info
		files   []string
		tables  map[string]bool
	}
	attempts := map[string]*attempt{}
	var attemptOrder []string
	for _, in := range all {
		m := pendingRe.FindStringSubmatch(in.Key)
		if m == nil {
			continue
		}
		rd, stage, fp := roundOf(m[1], m[2]), m[3], m[4]
		why := ""
		ownFP := false
		switch {
		case sealed[rd]:
			why = "part record of a sealed round"
		case committed[rd+" "+stage] != nil:
			for have := range committed[rd+" "+stage] {
				if strings.HasPrefix(have, fp) {
					ownFP = true
				}
			}
			if !ownFP {
				why = "part record of stage " + stage + ", which is committed with another fingerprint"
			}
		}
		if why != "" {
			if strings.HasPrefix(in.Key, prefix) {
				garbage = append(garbage, Object{Key: in.Key, Kind: KindPending, Bytes: in.Size, ModTime: in.ModTime, Why: why})
			}
			continue
		}
		rec, err := readRecord(ctx, s, in.Key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%v; keeping every part file of %s", err, rd))
			unreadable[rd] = true
			continue
		}
		if !ownFP {
			for _, k := range rec.files {
				referenced[k] = true
			}
			continue
		}
		id := rd + " " + stage + " " + fp
		a := attempts[id]
		if a == nil {
			a = &attempt{round: rd, stage: stage, tables: map[string]bool{}}
			attempts[id] = a
			attemptOrder = append(attemptOrder, id)
		}
		a.records = append(a.records, in)
		a.files = append(a.files, rec.files...)
		for _, t := range rec.tables {
			a.tables[t] = true
		}
	}
	for _, id := range attemptOrder {
		a := attempts[id]
		whole := true
		for t := range a.tables {
			whole = whole && tables[a.round+" "+t]
		}
		if !whole {
			// The commit was cut short: the records are needed to commit
			// the missing tables, and their files stay.
			for _, k := range a.files {
				referenced[k] = true
			}
			continue
		}
		for _, in := range a.records {
			if strings.HasPrefix(in.Key, prefix) {
				garbage = append(garbage, Object{Key: in.Key, Kind: KindPending, Bytes: in.Size, ModTime: in.ModTime, Why: "part record of stage " + a.stage + ", which is committed"})
			}
		}
	}
	res.Referenced = len(referenced)
	for _, in := range all {
		if !strings.HasPrefix(in.Key, prefix) {
			continue
		}
		m := partRe.FindStringSubmatch(in.Key)
		if m == nil || referenced[in.Key] || unreadable[roundOf(m[1], m[2])] {
			continue
		}
		garbage = append(garbage, Object{Key: in.Key, Kind: KindPart, Bytes: in.Size, ModTime: in.ModTime, Why: "no manifest or live part record lists it"})
	}
	if tc, ok := s.(storage.TempCollector); ok {
		temps, err := tc.ListTemp(ctx, prefix)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("gc: %w", err)
			}
			// Deleting nothing is safe; a bucket policy that allows
			// ListObjectsV2 but not ListMultipartUploads must not stop the
			// rest of the collection.
			res.Warnings = append(res.Warnings, fmt.Sprintf("temp objects not listed, none removed: %v", err))
		}
		for _, in := range temps {
			if run, _, _ := strings.Cut(in.Key, "/"); !runs[run] {
				// Not under a spade run: on S3 every incomplete upload
				// under the store's prefix is listed, another tool's too.
				continue
			}
			garbage = append(garbage, Object{Key: in.Key, Kind: KindTemp, Bytes: in.Size, ModTime: in.ModTime, Why: "temp object of a write that never finished (a temp file, or an incomplete multipart upload)"})
		}
	}
	sort.Slice(garbage, func(i, j int) bool { return garbage[i].Key < garbage[j].Key })
	cutoff := now().Add(-opts.Grace)
	for i := range garbage {
		// A store that gives no modification time (an S3-compatible server
		// that omits LastModified or an upload's Initiated) leaves the age
		// unknown: keep the object rather than take it for ancient.
		garbage[i].WithinGrace = garbage[i].ModTime.IsZero() || garbage[i].ModTime.After(cutoff)
	}
	if !opts.DryRun {
		dp := pool.New().WithContext(ctx).WithMaxGoroutines(concurrency).WithCancelOnError().WithFirstError()
		for i := range garbage {
			g := &garbage[i]
			if g.WithinGrace {
				continue
			}
			dp.Go(func(ctx context.Context) error {
				var err error
				if g.Kind == KindTemp {
					err = s.(storage.TempCollector).DeleteTemp(ctx, g.Key)
				} else {
					err = s.Delete(ctx, g.Key)
				}
				if err != nil && !errors.Is(err, storage.ErrNotFound) {
					return fmt.Errorf("gc: delete %s: %w", g.Key, err)
				}
				g.Deleted = true
				return nil
			})
		}
		err := dp.Wait()
		for _, g := range garbage {
			if g.Deleted {
				res.Deleted++
				res.DeletedBytes += g.Bytes
			}
		}
		if err != nil {
			res.Garbage = garbage
			return res, err
		}
	}
	res.Garbage = garbage
	return res, nil
}

// record is what gc reads of a part record: the data keys it lists and
// the tables it writes (files and references).
type record struct {
	files  []string
	tables []string
}

// readRecord reads a part record. The record's layout is the runner's
// (pipeline.PendingKey); only the file keys and table names are read.
func readRecord(ctx context.Context, s storage.Store, key string) (record, error) {
	data, err := storage.ReadAll(ctx, s, key)
	if err != nil {
		return record{}, err
	}
	var rec struct {
		Files map[string]struct {
			Key string `json:"key"`
		} `json:"files"`
		Refs map[string]string `json:"refs"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, fmt.Errorf("part record %s: malformed JSON: %w", key, err)
	}
	out := record{files: make([]string, 0, len(rec.Files))}
	for t, f := range rec.Files {
		out.files = append(out.files, f.Key)
		out.tables = append(out.tables, t)
	}
	for t := range rec.Refs {
		out.tables = append(out.tables, t)
	}
	sort.Strings(out.files)
	sort.Strings(out.tables)
	return out, nil
}
