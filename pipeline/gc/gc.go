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
//     deleted. An object listed without a modification time counts as
//     young.
//  5. Nothing of a run is deleted unless gc holds the run's gc lease and
//     the run has no live writer (pipeline.TakeGCLease, pipeline.CheckGC),
//     and the decision is made on a listing of the run taken under that
//     lease. Every writer registers before its first write and waits
//     while a gc lease is held (pipeline.RegisterWriter), so a part file
//     being written, or kept by a resumed part, is never deleted, whatever
//     the grace period (docs/format.md "Writers and gc").
package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// Log receives the warnings of the leases (stale ones removed); nil
	// means slog.Default().
	Log *slog.Logger
	// KeepCheckpoints, when set, removes the checkpoint weights of the
	// rounds the rule does not keep (`spade gc --keep-checkpoints`); nil
	// removes no weights. Optimizer state beyond each run's
	// grpo.keep_optimizer_rounds is removed either way. Never removed: the
	// checkpoints of a run's last sealed round and of later rounds, and of
	// each round a fork forked at (checkpointGarbage). Each round's files
	// are listed in its removal marker before any is deleted
	// (pipeline.CheckpointRemoval).
	KeepCheckpoints *KeepRule
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
	// Warnings name objects gc could not read and so treated as live, and
	// runs it left alone because they changed while it decided.
	Warnings []string `json:"warnings,omitempty"`
	// Busy names, with the reason, each run that gc (without Options.Run)
	// left alone because a writer or another gc held it; its garbage is
	// listed and not deleted.
	Busy []string `json:"busy,omitempty"`
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

// state is what gc has read of the store's manifests: the data keys they
// list, and per round which stages and tables are committed.
type state struct {
	mu         sync.Mutex
	read       map[string]bool            // manifest keys read
	referenced map[string]bool            // data keys any manifest lists
	committed  map[string]map[string]bool // "<run>/round=NNNNNN stage" -> its committed fingerprints
	tables     map[string]bool            // "<run>/round=NNNNNN table" of every manifest
	manifests  int
}

// readManifests reads the manifests keys (those not read before) into st.
// A manifest that vanished since it was listed references nothing; one
// that does not decode stops gc.
func (st *state) readManifests(ctx context.Context, s storage.Store, keys []string) error {
	wp := pool.New().WithContext(ctx).WithMaxGoroutines(concurrency).WithCancelOnError().WithFirstError()
	for _, key := range keys {
		st.mu.Lock()
		seen := st.read[key]
		st.read[key] = true
		st.mu.Unlock()
		if seen {
			continue
		}
		wp.Go(func(ctx context.Context) error {
			m, err := pipeline.ReadManifest(ctx, s, key)
			if errors.Is(err, storage.ErrNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("gc: %w", err)
			}
			sm := manifestRe.FindStringSubmatch(key)
			st.mu.Lock()
			defer st.mu.Unlock()
			st.manifests++
			rs := roundOf(sm[1], sm[2]) + " " + m.Stage
			if st.committed[rs] == nil {
				st.committed[rs] = map[string]bool{}
			}
			st.committed[rs][m.StageFingerprint] = true
			st.tables[roundOf(sm[1], sm[2])+" "+sm[3]] = true
			for _, f := range m.Files {
				st.referenced[f.Key] = true
			}
			return nil
		})
	}
	return wp.Wait()
}

// manifestKeys returns the manifest keys of a listing.
func manifestKeys(infos []storage.Info) []string {
	var out []string
	for _, in := range infos {
		if manifestRe.MatchString(in.Key) {
			out = append(out, in.Key)
		}
	}
	return out
}

// runOf is the run a key lies under ("" for none).
func runOf(key string) string {
	run, _, ok := strings.Cut(key, "/")
	if !ok {
		return ""
	}
	return run
}

// Collect finds the garbage of opts.Run (or of every run) in s and deletes
// what is older than opts.Grace unless opts.DryRun.
//
// It lists the store and reads every manifest of every run without any
// lease (what other runs reference). Then, for each run that has garbage
// past the grace period, and only when not DryRun, it takes the run's gc
// lease (pipeline.TakeGCLease: no live writer of the run, no other gc),
// lists the run again, reads the manifests and part records of that
// listing and decides on that listing alone, lists the run once more and
// deletes nothing of it when anything but a lease changed meanwhile (a
// writer that does not register, such as an older build), checks the
// lease and the writers again (pipeline.CheckGC), and only then deletes.
// Writers register before their first write and wait while a gc lease
// is held, so nothing a writer of the run writes, or finds and keeps, can
// be deleted.
//
// Errors: a store error, or a manifest that does not decode
// (ErrUnknownVersion, malformed JSON): gc refuses to guess what an
// unreadable manifest references. With opts.Run set, a run with no
// object at all under "<run>/" in the listing (a name typed wrong) is an
// error matching pipeline.ErrNotCommitted, "run X does not exist ...", as
// spade status says for a run without a run file; a run with part files
// but no run file yet (its first command failed before committing) is
// collected; and a run that a writer or another gc holds is an error
// wrapping pipeline.ErrBusy, with the garbage found listed and none of
// it deleted. Without opts.Run such a run is skipped and named in
// Result.Busy.
func Collect(ctx context.Context, s storage.Store, opts Options) (*Result, error) {
	if opts.Run != "" {
		if err := pipeline.ValidateRunName(opts.Run); err != nil {
			return nil, err
		}
	}
	if opts.Grace < 0 {
		return nil, fmt.Errorf("gc: grace period must be >= 0 (got %s)", opts.Grace)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	all, err := s.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("gc: list %s: %w", s.URL(), err)
	}
	if opts.Run != "" && !slices.ContainsFunc(all, func(in storage.Info) bool { return strings.HasPrefix(in.Key, opts.Run+"/") }) {
		return nil, noRunError{run: opts.Run, store: s.URL()}
	}
	st := &state{read: map[string]bool{}, referenced: map[string]bool{}, committed: map[string]map[string]bool{}, tables: map[string]bool{}}
	if err := st.readManifests(ctx, s, manifestKeys(all)); err != nil {
		return nil, err
	}
	byRun := map[string][]storage.Info{}
	for _, in := range all {
		if run := runOf(in.Key); run != "" && (opts.Run == "" || run == opts.Run) {
			byRun[run] = append(byRun[run], in)
		}
	}
	prefix := ""
	if opts.Run != "" {
		prefix = opts.Run + "/"
	}
	temps := map[string][]storage.Info{}
	res := &Result{Garbage: []Object{}}
	if tc, ok := s.(storage.TempCollector); ok {
		ts, err := tc.ListTemp(ctx, prefix)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("gc: %w", err)
			}
			// Deleting nothing is safe; a bucket policy that allows
			// ListObjectsV2 but not ListMultipartUploads must not stop the
			// rest of the collection.
			res.Warnings = append(res.Warnings, fmt.Sprintf("temp objects not listed, none removed: %v", err))
		}
		for _, in := range ts {
			temps[runOf(in.Key)] = append(temps[runOf(in.Key)], in)
		}
	}
	recRefs := map[string]bool{}
	var garbage []Object
	var firstErr error
	// Run files (to find forks) are read only when some run has
	// checkpoint files: a store of 1,000 runs without any costs no reads.
	var rf runFiles
	if slices.ContainsFunc(all, func(in storage.Info) bool { return checkpointFileRe.MatchString(in.Key) }) {
		rf = readRunFiles(ctx, s, all)
	}
	for _, run := range sortedRuns(byRun) {
		g, warns := st.garbage(ctx, s, run, byRun[run], temps[run], recRefs)
		res.Warnings = append(res.Warnings, warns...)
		cg, warns := checkpointGarbage(run, byRun[run], rf, opts)
		g = append(g, cg...)
		res.Warnings = append(res.Warnings, warns...)
		markGrace(g, opts)
		// A run with writer registrations is looked at under its lease
		// too: TakeGCLease removes the stale ones (of writers killed).
		registered := slices.ContainsFunc(byRun[run], func(in storage.Info) bool { return strings.HasPrefix(in.Key, pipeline.WriterLeasePrefix(run)) })
		if opts.DryRun || (!registered && !slices.ContainsFunc(g, func(o Object) bool { return !o.WithinGrace })) {
			garbage = append(garbage, g...)
			continue
		}
		g, warns, err := collectRun(ctx, s, st, run, opts, g, recRefs, rf)
		res.Warnings = append(res.Warnings, warns...)
		garbage = append(garbage, g...)
		if errors.Is(err, pipeline.ErrBusy) && opts.Run == "" {
			res.Busy = append(res.Busy, err.Error())
			continue
		}
		if err != nil {
			firstErr = err
			break
		}
	}
	sort.Slice(garbage, func(i, j int) bool { return garbage[i].Key < garbage[j].Key })
	if garbage == nil {
		garbage = []Object{} // [] not null in JSON
	}
	res.Garbage = garbage
	res.Manifests = st.manifests
	for k := range st.referenced {
		recRefs[k] = true
	}
	res.Referenced = len(recRefs)
	for _, g := range garbage {
		if g.Deleted {
			res.Deleted++
			res.DeletedBytes += g.Bytes
		}
	}
	return res, firstErr
}

// sortedRuns returns the keys of byRun, sorted.
func sortedRuns(byRun map[string][]storage.Info) []string {
	out := make([]string, 0, len(byRun))
	for run := range byRun {
		out = append(out, run)
	}
	sort.Strings(out)
	return out
}

// markGrace sets WithinGrace on each object younger than opts.Grace, or
// listed without a modification time: a store that gives none (an
// S3-compatible server that omits LastModified or an upload's Initiated)
// leaves the age unknown, and the object is kept rather than taken for
// ancient.
func markGrace(g []Object, opts Options) {
	cutoff := opts.Now().Add(-opts.Grace)
	for i := range g {
		g[i].WithinGrace = g[i].ModTime.IsZero() || g[i].ModTime.After(cutoff)
	}
}

// collectRun decides again on run under its gc lease and deletes what is
// garbage past the grace period. prelim is what the lease-free pass
// found; it is returned, none of it deleted, when the lease cannot be
// taken (an error wrapping pipeline.ErrBusy) or the run changed.
func collectRun(ctx context.Context, s storage.Store, st *state, run string, opts Options, prelim []Object, recRefs map[string]bool, rf runFiles) ([]Object, []string, error) {
	lease, err := pipeline.TakeGCLease(ctx, s, run, opts.Log)
	if err != nil {
		return prelim, nil, fmt.Errorf("gc: run %s: %w", run, err)
	}
	defer lease.Release()
	listing, err := s.List(ctx, run+"/")
	if err != nil {
		return prelim, nil, fmt.Errorf("gc: list %s/: %w", run, err)
	}
	if err := st.readManifests(ctx, s, manifestKeys(listing)); err != nil {
		return prelim, nil, err
	}
	var temps []storage.Info
	if tc, ok := s.(storage.TempCollector); ok {
		if temps, err = tc.ListTemp(ctx, run+"/"); err != nil {
			if ctx.Err() != nil {
				return prelim, nil, fmt.Errorf("gc: %w", err)
			}
			temps = nil // warned about in the first pass
		}
	}
	g, warns := st.garbage(ctx, s, run, listing, temps, recRefs)
	// Checkpoint files are decided again only when the first pass found
	// some, with every run file read again under the lease: a fork made
	// since then protects its fork round.
	if slices.ContainsFunc(prelim, func(o Object) bool { return o.Kind == KindWeights || o.Kind == KindOptimizer }) {
		everything, err := s.List(ctx, "")
		if err != nil {
			return prelim, nil, fmt.Errorf("gc: list %s: %w", s.URL(), err)
		}
		rf = readRunFiles(ctx, s, everything)
		cg, cwarns := checkpointGarbage(run, listing, rf, opts)
		g = append(g, cg...)
		warns = append(warns, cwarns...)
	}
	markGrace(g, opts)
	again, err := s.List(ctx, run+"/")
	if err != nil {
		return g, warns, fmt.Errorf("gc: list %s/: %w", run, err)
	}
	if changed := differ(listing, again); changed != "" {
		warns = append(warns, fmt.Sprintf("run %s changed while gc decided (%s), though no writer is registered (a writer of an older build?); nothing of it deleted", run, changed))
		return g, warns, nil
	}
	if err := pipeline.CheckGC(ctx, s, run, lease, opts.Log); err != nil {
		return g, warns, fmt.Errorf("gc: run %s: %w", run, err)
	}
	keepOpt := func(run string) string {
		if f := rf.files[run]; f != nil {
			return fmt.Sprintf("grpo.keep_optimizer_rounds = %d", f.Config.GRPO.KeepOptimizerRounds)
		}
		return "grpo.keep_optimizer_rounds"
	}
	if err := writeRemovalMarkers(ctx, s, g, opts, keepOpt); err != nil {
		return g, warns, err
	}
	dp := pool.New().WithContext(ctx).WithMaxGoroutines(concurrency).WithCancelOnError().WithFirstError()
	for i := range g {
		o := &g[i]
		if o.WithinGrace {
			continue
		}
		dp.Go(func(ctx context.Context) error {
			var err error
			if o.Kind == KindTemp {
				err = s.(storage.TempCollector).DeleteTemp(ctx, o.Key)
			} else {
				err = s.Delete(ctx, o.Key)
			}
			if err != nil && !errors.Is(err, storage.ErrNotFound) {
				return fmt.Errorf("gc: delete %s: %w", o.Key, err)
			}
			o.Deleted = true
			return nil
		})
	}
	return g, warns, dp.Wait()
}

// differ names a key (other than a lease's) that is in one listing and
// not the other, or whose size differs; "" when the listings agree.
func differ(a, b []storage.Info) string {
	size := map[string]int64{}
	for _, in := range a {
		if !strings.Contains(in.Key, "/_LEASE") {
			size[in.Key] = in.Size
		}
	}
	n := 0
	for _, in := range b {
		if strings.Contains(in.Key, "/_LEASE") {
			continue
		}
		n++
		was, ok := size[in.Key]
		switch {
		case !ok:
			return in.Key + " appeared"
		case was != in.Size:
			return in.Key + " changed size"
		}
	}
	if n != len(size) {
		for _, in := range b {
			delete(size, in.Key)
		}
		for k := range size {
			return k + " vanished"
		}
	}
	return ""
}

// pendingAttempt is one commit attempt of a stage committed with its own
// fingerprint, keyed "<run>/round=NNNNNN stage fp": the runner writes a
// stage's manifests one table at a time, so a commit cut short (a kill, a
// full disk) leaves some tables committed and the others still needing
// every part record and the files they list. A package-level type so
// garbage stays short.
type pendingAttempt struct {
	round   string // "<run>/round=NNNNNN"
	stage   string
	records []storage.Info
	files   []string
	tables  map[string]bool
}

// sealedRounds returns the rounds ("<run>/round=NNNNNN") of listing that
// have a seal, and whether listing holds the run file; split out of
// garbage.
func sealedRounds(listing []storage.Info) (map[string]bool, bool) {
	sealed := map[string]bool{}
	hasRunFile := false
	for _, in := range listing {
		if m := sealRe.FindStringSubmatch(in.Key); m != nil {
			sealed[roundOf(m[1], m[2])] = true
		}
		if runFileRe.MatchString(in.Key) {
			hasRunFile = true
		}
	}
	return sealed, hasRunFile
}

// garbage returns the garbage of run in its listing (every key under
// "<run>/"): part records that can never be committed, part files that
// no manifest read into st and no live part record lists, and temps (the
// run's temp objects, kept unless the run has a run file). The files live
// part records list are added to recRefs. Warnings name part records that
// could not be read (every part file of their round is then kept).
func (st *state) garbage(ctx context.Context, s storage.Store, run string, listing, temps []storage.Info, recRefs map[string]bool) ([]Object, []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	sealed, hasRunFile := sealedRounds(listing)
	var warns []string
	garbage := []Object{}
	referenced := map[string]bool{} // files of live part records
	unreadable := map[string]bool{} // rounds with a part record gc could not read
	// Part records of a stage committed with their own fingerprint are
	// judged per attempt (pendingAttempt).
	attempts := map[string]*pendingAttempt{}
	var attemptOrder []string
	for _, in := range listing {
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
		case st.committed[rd+" "+stage] != nil:
			for have := range st.committed[rd+" "+stage] {
				if strings.HasPrefix(have, fp) {
					ownFP = true
				}
			}
			if !ownFP {
				why = "part record of stage " + stage + ", which is committed with another fingerprint"
			}
		}
		if why != "" {
			garbage = append(garbage, Object{Key: in.Key, Kind: KindPending, Bytes: in.Size, ModTime: in.ModTime, Why: why})
			continue
		}
		rec, err := readRecord(ctx, s, in.Key)
		if errors.Is(err, storage.ErrNotFound) {
			// Removed since the listing (a seal cleaned it up): under the
			// gc lease that cannot happen, and in the lease-free pass
			// the files it named are kept for this round.
			unreadable[rd] = true
			continue
		}
		if err != nil {
			warns = append(warns, fmt.Sprintf("%v; keeping every part file of %s", err, rd))
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
			a = &pendingAttempt{round: rd, stage: stage, tables: map[string]bool{}}
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
			whole = whole && st.tables[a.round+" "+t]
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
			garbage = append(garbage, Object{Key: in.Key, Kind: KindPending, Bytes: in.Size, ModTime: in.ModTime, Why: "part record of stage " + a.stage + ", which is committed"})
		}
	}
	for k := range referenced {
		recRefs[k] = true
	}
	for _, in := range listing {
		m := partRe.FindStringSubmatch(in.Key)
		if m == nil || st.referenced[in.Key] || referenced[in.Key] || unreadable[roundOf(m[1], m[2])] {
			continue
		}
		garbage = append(garbage, Object{Key: in.Key, Kind: KindPart, Bytes: in.Size, ModTime: in.ModTime, Why: "no manifest or live part record lists it"})
	}
	if hasRunFile {
		// Without a run file the directory may not be spade's: on S3
		// every incomplete upload under the store's prefix is listed,
		// another tool's too.
		for _, in := range temps {
			garbage = append(garbage, Object{Key: in.Key, Kind: KindTemp, Bytes: in.Size, ModTime: in.ModTime, Why: "temp object of a write that never finished (a temp file, or an incomplete multipart upload)"})
		}
	}
	return garbage, warns
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
