package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// Damage is one damaged or missing object that Verify found.
type Damage struct {
	// Key is the store key of the damaged, missing or disagreeing object
	// (a data file, a manifest, a seal, the run file).
	Key string `json:"key"`
	// Round is the round it belongs to (-1 for the run file).
	Round int `json:"round"`
	// Table is the table whose manifest lists it, or whose manifest it is
	// ("" for a seal or the run file).
	Table string `json:"table,omitempty"`
	// Problem says what is wrong, in words (it wraps no error: Verify
	// reports every damage, not the first).
	Problem string `json:"problem"`
	// Repair is the spade command that repairs it, "" when none does (a
	// committed file: tables are written once).
	Repair string `json:"repair,omitempty"`
	// Hint says what to do when no command repairs it.
	Hint string `json:"hint,omitempty"`
}

// VerifyReport is what Verify found in one run.
type VerifyReport struct {
	// Run is the run verified.
	Run string `json:"run"`
	// Rounds are the rounds verified, in order.
	Rounds []int `json:"rounds"`
	// Sealed counts the sealed rounds among them.
	Sealed int `json:"sealed"`
	// Manifests is the number of manifests read.
	Manifests int `json:"manifests"`
	// Files is the number of distinct data files read in full and checked
	// (size, sha256, Parquet footer row and row group counts).
	Files int `json:"files"`
	// Bytes is their total size in bytes.
	Bytes int64 `json:"bytes"`
	// Damage lists every damaged or missing object, sorted by round and key.
	Damage []Damage `json:"damage"`
	// Leftovers are part records left in sealed rounds (a kill during the
	// seal's clean-up): harmless, removed by spade gc.
	Leftovers []string `json:"leftovers,omitempty"`
	// SideFiles is the number of side files read in full and checked
	// (size and sha256): the checkpoint files the checkpoints tables list,
	// and the files with a side record under VerifyOptions.SideDirs.
	SideFiles int `json:"side_files"`
	// SideBytes is their total size in bytes, as listed.
	SideBytes int64 `json:"side_bytes"`
	// RemovedByGC lists the checkpoint files that are missing because
	// spade gc removed them by a retention rule (the round's
	// checkpoints/_REMOVED.json names them): on purpose, not damage.
	RemovedByGC []string `json:"removed_by_gc,omitempty"`
	// Unrecorded lists the side files under VerifyOptions.SideDirs that
	// have no side record (written by a build before records, or killed
	// between the file and its record): their content cannot be checked.
	// One that is a .parquet file that does not open is damage instead.
	Unrecorded []string `json:"unrecorded,omitempty"`
}

// VerifyOptions selects what Verify checks.
type VerifyOptions struct {
	// Tables are the table names a round may hold (every stage output);
	// unsealed rounds are looked up by them, and a sealed round's
	// manifest of a table its seal does not list is damage.
	Tables []string
	// Round limits the check to one round when >= 0; -1 checks rounds 0
	// up to the first unsealed one.
	Round int
	// SideDirs are key prefixes relative to the run ("evals/") under which
	// side files are kept with their side records (SideRecord): each
	// recorded file is read in full and checked against its record, and
	// a file there without one is listed in VerifyReport.Unrecorded.
	SideDirs []string
}

// verifyReads bounds how many data files Verify reads at once.
const verifyReads = 8

// Verify reads everything run has committed and checks it: the run file
// (RunFile.VerifyConfig), each round's seal and its chain (parent = round
// id of the seal before), each manifest a seal lists (it decodes, says
// its round and table, and has the content digest the seal records), the
// committed manifests of the unsealed round in progress, and every data
// file those manifests list, read in full: size, sha256 and the row and
// row group counts of its Parquet footer. Part records of an unsealed
// round are checked too (their files' size and sha256); a damaged one is
// repaired by running the round again (the part runs again). It collects
// every damage instead of stopping at the first. Errors are only those
// that stop it: the run does not exist (ErrNotCommitted), a store error
// other than a missing object, ctx's.
func Verify(ctx context.Context, s storage.Store, run string, o VerifyOptions) (*VerifyReport, error) {
	rep := &VerifyReport{Run: run, Rounds: []int{}, Damage: []Damage{}}
	rf, err := ReadRunFile(ctx, s, run)
	if err != nil {
		if errors.Is(err, ErrNotCommitted) {
			return nil, err
		}
		rep.Damage = append(rep.Damage, Damage{Key: RunFileKey(run), Round: -1, Problem: err.Error(), Hint: "restore it from a copy"})
		return rep, nil
	}
	if err := rf.VerifyConfig(); err != nil {
		rep.Damage = append(rep.Damage, Damage{Key: RunFileKey(run), Round: -1, Problem: err.Error(), Hint: "restore it from a copy"})
	}
	next, err := NextRound(ctx, s, run)
	if err != nil {
		return nil, err
	}
	lo, hi := 0, next
	if o.Round >= 0 {
		lo, hi = o.Round, o.Round
	}
	v := &verifier{s: s, run: run, seen: map[string]bool{}, rep: rep}
	var prevID string
	for r := lo; r <= hi; r++ {
		rep.Rounds = append(rep.Rounds, r)
		if err := v.round(ctx, r, o.Tables, &prevID); err != nil {
			return nil, err
		}
	}
	if err := v.readFiles(ctx); err != nil {
		return nil, err
	}
	if err := v.sideFiles(ctx, o); err != nil {
		return nil, err
	}
	sort.Strings(rep.RemovedByGC)
	sort.Strings(rep.Unrecorded)
	sort.SliceStable(rep.Damage, func(i, j int) bool {
		a, b := rep.Damage[i], rep.Damage[j]
		if a.Round != b.Round {
			return a.Round < b.Round
		}
		return a.Key < b.Key
	})
	return rep, nil
}

// verifier holds one Verify call's state.
type verifier struct {
	s     storage.Store
	run   string
	rep   *VerifyReport
	mu    sync.Mutex
	seen  map[string]bool // data keys queued
	files []fileCheck
	// ckpts are the checkpoints tables read, whose rows list checkpoint
	// files (checked by sideFiles once the tables' own files are read).
	ckpts []ckptTable
}

// ckptTable is one checkpoints table version that Verify read.
type ckptTable struct {
	round  int
	sealed bool
	m      *Manifest
}

// fileCheck is one data file to read, with where it is listed.
type fileCheck struct {
	f      FileEntry
	round  int
	table  string
	sealed bool
	// record is the part record that lists the file ("" for a manifest).
	record string
}

func (v *verifier) damage(d Damage) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rep.Damage = append(v.rep.Damage, d)
}

// committedHint is the Hint for damage to what a round has committed.
func (v *verifier) committedHint(r int, sealed bool) string {
	what := "a committed table is written once, so no spade command rewrites it"
	if sealed {
		what = fmt.Sprintf("round %d is sealed, so no spade command rewrites it", r)
	}
	fork := ""
	if r >= 1 {
		fork = fmt.Sprintf(", or branch from the last intact round with `spade fork %s NEW --round %d`", v.run, r-1)
	}
	return what + ": restore the object from a copy (its name and the manifest give its sha256)" + fork
}

// round checks round r's seal (chaining onto *prevID, the round id of
// round r-1's seal when it was read) and queues the files of its manifests.
func (v *verifier) round(ctx context.Context, r int, tables []string, prevID *string) error {
	sealKey := SealKey(v.run, r)
	seal, err := ReadSeal(ctx, v.s, v.run, r)
	sealed := err == nil
	switch {
	case errors.Is(err, ErrNotCommitted):
	case errors.Is(err, ErrUnknownVersion) || (err != nil && strings.Contains(err.Error(), "malformed JSON")):
		v.damage(Damage{Key: sealKey, Round: r, Problem: err.Error(), Hint: v.committedHint(r, true)})
		*prevID = ""
		return nil
	case err != nil:
		return err
	}
	if sealed {
		v.rep.Sealed++
		want := *prevID
		if r == 0 {
			want = ""
		} else if want == "" {
			if p, perr := ReadSeal(ctx, v.s, v.run, r-1); perr == nil {
				want = p.Digest()
			}
		}
		if seal.Round != r {
			v.damage(Damage{Key: sealKey, Round: r, Problem: fmt.Sprintf("%v: it says round %d", ErrIntegrity, seal.Round), Hint: v.committedHint(r, true)})
		}
		if seal.Parent != want && (r == 0 || want != "") {
			v.damage(Damage{Key: sealKey, Round: r, Problem: fmt.Sprintf("%v: parent %.12s is not the round id %.12s of %s", ErrIntegrity, seal.Parent, want, SealKey(v.run, r-1)), Hint: v.committedHint(r, true)})
		}
		*prevID = seal.Digest()
		pending, err := v.s.List(ctx, RoundDir(v.run, r)+"/_pending/")
		if err != nil {
			return err
		}
		for _, in := range pending {
			v.rep.Leftovers = append(v.rep.Leftovers, in.Key)
		}
	} else {
		*prevID = ""
	}
	names := map[string]bool{}
	for _, t := range tables {
		names[t] = true
	}
	if sealed {
		for t := range seal.Tables {
			names[t] = true
		}
	}
	for _, t := range sortedKeys(names) {
		key := ManifestKey(v.run, r, t)
		listed := false
		if sealed {
			_, listed = seal.Tables[t]
		}
		m, err := ReadManifest(ctx, v.s, key)
		if isNotFound(err) {
			if listed {
				v.damage(Damage{Key: key, Round: r, Table: t, Problem: fmt.Sprintf("%v: missing, but %s lists it", ErrIntegrity, sealKey), Hint: v.committedHint(r, true)})
			}
			continue
		}
		if err != nil && !errors.Is(err, ErrUnknownVersion) && strings.HasPrefix(err.Error(), "read manifest") {
			return err
		}
		if err != nil {
			v.damage(Damage{Key: key, Round: r, Table: t, Problem: err.Error(), Hint: v.committedHint(r, sealed)})
			continue
		}
		v.rep.Manifests++
		switch {
		case sealed && !listed:
			v.damage(Damage{Key: key, Round: r, Table: t, Problem: fmt.Sprintf("%v: round %d is sealed and %s does not list table %s", ErrIntegrity, r, sealKey, t), Hint: "it was added after the seal; nothing reads it: remove it"})
			continue
		case sealed:
			if err := matchSeal(v.run, seal, t, m); err != nil {
				v.damage(Damage{Key: key, Round: r, Table: t, Problem: err.Error(), Hint: v.committedHint(r, true)})
			}
		}
		for _, f := range m.Files {
			v.queue(fileCheck{f: f, round: r, table: t, sealed: sealed})
		}
		if m.Kind == schemas.Checkpoints.Name {
			v.ckpts = append(v.ckpts, ckptTable{round: r, sealed: sealed, m: m})
		}
	}
	if !sealed {
		return v.records(ctx, r)
	}
	return nil
}

// records queues the files of round r's part records (an unsealed round).
func (v *verifier) records(ctx context.Context, r int) error {
	infos, err := v.s.List(ctx, RoundDir(v.run, r)+"/_pending/")
	if err != nil {
		return err
	}
	for _, in := range infos {
		data, err := storage.ReadAll(ctx, v.s, in.Key)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		var rec partRecord
		if jerr := json.Unmarshal(data, &rec); jerr != nil {
			v.damage(Damage{Key: in.Key, Round: r, Problem: fmt.Sprintf("malformed part record: %v", jerr), Repair: v.repairPart(r, "")})
			continue
		}
		for _, t := range sortedKeys(rec.Files) {
			v.queue(fileCheck{f: rec.Files[t], round: r, table: t, record: in.Key})
		}
	}
	return nil
}

// repairPart is the command that runs round r's missing parts again.
func (v *verifier) repairPart(r int, stage string) string {
	if stage != "" {
		return fmt.Sprintf("spade --run %s round %d (or spade --run %s stage %s --round %d, for each shard)", v.run, r, v.run, stage, r)
	}
	return fmt.Sprintf("spade --run %s round %d", v.run, r)
}

func (v *verifier) queue(c fileCheck) {
	id := c.f.Key + " " + c.f.SHA256
	if v.seen[id] {
		return
	}
	v.seen[id] = true
	v.files = append(v.files, c)
}

// readFiles reads every queued file in full and checks it.
func (v *verifier) readFiles(ctx context.Context) error {
	p := pool.New().WithContext(ctx).WithMaxGoroutines(verifyReads).WithCancelOnError().WithFirstError()
	for _, c := range v.files {
		p.Go(func(ctx context.Context) error {
			problem, err := checkFile(ctx, v.s, c.f)
			if err != nil {
				return err
			}
			v.mu.Lock()
			v.rep.Files++
			v.rep.Bytes += c.f.Bytes
			v.mu.Unlock()
			if problem == "" {
				return nil
			}
			d := Damage{Key: c.f.Key, Round: c.round, Table: c.table, Problem: problem}
			if c.record != "" {
				stage, _, _ := strings.Cut(strings.TrimPrefix(c.record, RoundDir(v.run, c.round)+"/_pending/"), "/")
				if i := strings.LastIndexByte(stage, '-'); i > 0 {
					stage = stage[:i]
				}
				d.Problem += fmt.Sprintf(" (listed by part record %s of a stage not committed yet)", c.record)
				d.Repair = v.repairPart(c.round, stage)
			} else {
				d.Hint = v.committedHint(c.round, c.sealed)
			}
			v.damage(d)
			return nil
		})
	}
	return p.Wait()
}

// checkFile reads f and says what is wrong with it ("" when whole):
// missing, size, sha256, or a Parquet footer whose row or row group count
// differs from f's. Errors: the store's, other than a missing object.
func checkFile(ctx context.Context, s storage.Store, f FileEntry) (string, error) {
	data, err := ReadVerified(ctx, s, f)
	if errors.Is(err, ErrIntegrity) {
		return err.Error(), nil
	}
	if err != nil {
		return "", err
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Sprintf("%s: %v: its sha256 matches, but it is not a readable Parquet file: %v", f.Key, ErrIntegrity, err), nil
	}
	if pf.NumRows() != f.Rows || int64(len(pf.RowGroups())) != f.RowGroups {
		return fmt.Sprintf("%s: %v: %d rows in %d row groups, manifest says %d in %d", f.Key, ErrIntegrity, pf.NumRows(), len(pf.RowGroups()), f.Rows, f.RowGroups), nil
	}
	return "", nil
}
