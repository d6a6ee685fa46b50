package evaluate

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"github.com/parquet-go/parquet-go"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/trainer"
)

// Evaluations of sealed rounds (`spade eval --round R`) cannot join the
// round's seal without breaking the chain of round digests (docs/design.md
// "Commit protocol"), so they are kept beside the rounds: one Parquet
// file of the evals schema per (checkpoint, eval settings) under
// SidePrefix, content-addressed by SideDigest. Nothing seals them; gc
// leaves them alone (they are no part or part record); the report and
// DuckDB read them (docs/recipes.md "Evaluation").

// SideDir is where a run keeps its evaluations outside the rounds,
// relative to the run: what `spade verify` checks through their side
// records (pipeline.VerifyOptions.SideDirs).
const SideDir = "evals/"

// SidePrefix is the key prefix of run's evaluations outside the rounds:
// "<run>/evals/".
func SidePrefix(run string) string { return run + "/" + SideDir }

// SideKey is the key of the evaluation of round r with digest d (SideDigest):
// "<run>/evals/round=%06d/evals-<d>.parquet".
func SideKey(run string, r int, digest string) string {
	return fmt.Sprintf("%sround=%06d/evals-%s.parquet", SidePrefix(run), r, digest)
}

var sideKeyRe = regexp.MustCompile(`^[^/]+/evals/round=(\d{6})/evals-[0-9a-f]{16}\.parquet$`)

// SideDigest identifies one evaluation: the first 16 hex digits of the
// sha256 of the checkpoint id, the eval stage's config subset (eval
// settings but eval.every and the operational ones, and the agent's
// serving, and the evaluator's code digest: Settings of the pinned
// config) and, with lm_eval
// tasks, the content of eval.lm_eval.include_path (made absolute; every
// regular file under it, path and bytes: an edited task file, or a data
// file kept in that directory, is another evaluation). Data files a task
// names outside the directory are not read: after editing one, score
// again with --force. The same checkpoint scored with the same settings
// and task files has the same digest. Errors: the task directory cannot
// be read.
func SideDigest(cfg *config.Config, checkpointID string) (string, error) {
	pinned := cfg.Pinned()
	pinned.Eval = cfg.Eval // kept whatever eval.every says
	pinned.Eval.Concurrency, pinned.Eval.TimeoutS, pinned.Eval.Python = 0, 0, ""
	pinned.Eval.Every = 0 // when the stage runs, not what it scores
	if le := &pinned.Eval.LMEval; le.IncludePath != "" {
		abs, err := filepath.Abs(le.IncludePath) // as the evaluator is given it (NewRequest)
		if err != nil {
			return "", fmt.Errorf("eval.lm_eval.include_path: %w", err)
		}
		le.IncludePath = abs
	}
	sub, err := json.Marshal(Settings(pinned.Eval, pinned.Model))
	if err != nil {
		panic("evaluate: config subset does not encode: " + err.Error())
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", checkpointID, sub)
	if le := cfg.Eval.LMEval; len(le.Tasks) > 0 {
		if err := hashTree(h, le.IncludePath); err != nil {
			return "", fmt.Errorf("eval.lm_eval.include_path: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// hashTree writes each regular file under dir, and each link to one, to
// h as its slash path, length and bytes, in lexical order (links to
// directories are not followed).
func hashTree(h io.Writer, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
				return nil // a dangling link or one to a directory
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "\x00%s\x00%d\x00", filepath.ToSlash(rel), len(data))
		h.Write(data)
		return nil
	})
}

// WriteSide stores rows (one evaluation of round r) at SideKey(run, r,
// digest), replacing an earlier file of that key, and then its side
// record (pipeline.WriteSideFile: sha256, size, rows and row groups, and
// repair, the command that writes it again), which `spade verify` checks
// it against. Errors: encoding, the store's.
func WriteSide(ctx context.Context, s storage.Store, run string, r int, digest string, rows []schemas.Eval, repair string) (string, error) {
	data, err := table.Encode(schemas.Evals, rows)
	if err != nil {
		return "", err
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", fmt.Errorf("evaluate: the encoded evals file does not open: %w", err)
	}
	key := SideKey(run, r, digest)
	rec := pipeline.SideRecord{Round: r, Writer: "spade eval", File: pipeline.FileEntry{Rows: pf.NumRows(), RowGroups: int64(len(pf.RowGroups()))}, Repair: repair}
	if err := pipeline.WriteSideFile(ctx, s, key, data, rec); err != nil {
		return "", err
	}
	return key, nil
}

// ReadSide reads every evaluation of run kept outside the rounds, by
// round, each round's files in key order. A file that does not decode as
// the evals table, or whose size or sha256 is not what its side record
// says, is left out and its error (table.ErrCorrupt or
// pipeline.ErrIntegrity, naming the key) returned in damaged, for the
// caller to report: side files are not
// sealed, and one damaged file must not hide the run's report (`spade
// eval --round R --force` rewrites it). Errors: the store's.
func ReadSide(ctx context.Context, s storage.Store, run string) (rows map[int][]schemas.Eval, damaged []error, err error) {
	infos, err := s.List(ctx, SidePrefix(run))
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	out := map[int][]schemas.Eval{}
	for _, in := range infos {
		m := sideKeyRe.FindStringSubmatch(in.Key)
		if m == nil {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		data, err := storage.ReadAll(ctx, s, in.Key)
		if errors.Is(err, storage.ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, nil, err
		}
		if err := checkRecord(ctx, s, in.Key, data); err != nil {
			if !errors.Is(err, pipeline.ErrIntegrity) {
				return nil, nil, err
			}
			damaged = append(damaged, fmt.Errorf("%w (spade eval --round %d --force with the settings and the build that wrote it rewrites it; or delete it)", err, r))
			continue
		}
		rows, _, err := table.Decode(schemas.Evals, in.Key, data)
		if err != nil {
			damaged = append(damaged, fmt.Errorf("%w (spade eval --round %d --force with the settings and the build that wrote it rewrites it; or delete it)", err, r))
			continue
		}
		out[r] = append(out[r], rows...)
	}
	return out, damaged, nil
}

// checkRecord checks data, read from key, against its side record: nil
// when they agree or there is no record (a file of a build before
// records). Errors: the store's; a record that does not decode, or a
// size or sha256 other than it records (wrapping pipeline.ErrIntegrity,
// naming the key).
func checkRecord(ctx context.Context, s storage.Store, key string, data []byte) error {
	rec, err := pipeline.ReadSideRecord(ctx, s, key)
	if err != nil || rec == nil {
		return err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); int64(len(data)) != rec.File.Bytes || got != rec.File.SHA256 {
		return fmt.Errorf("%s: %w: %d bytes with sha256 %.12s, but its side record %s says %d bytes with sha256 %.12s", key, pipeline.ErrIntegrity, len(data), got, pipeline.SideRecordKey(key), rec.File.Bytes, rec.File.SHA256)
	}
	return nil
}

// RoundEvals returns the evaluation scores of round r of run: the rows of
// the round's evals table (the eval stage's), then those of the
// evaluations kept outside the rounds (side, from ReadSide), a (suite,
// task, metric) already seen being skipped, so the sealed table wins.
// Of several side evaluations of one score (other settings: more items,
// another prompt), the one over the most items wins, the first in key
// order among equals: a pure function of the store's content.
// Errors: reading the round's table (pipeline.ErrIntegrity, ...); a round
// without the table is not an error.
func RoundEvals(ctx context.Context, s storage.Store, run string, r int, side map[int][]schemas.Eval) ([]schemas.Eval, error) {
	var rows []schemas.Eval
	m, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey(run, r, "evals"))
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		if rows, err = pipeline.ReadManifestRows(ctx, s, schemas.Evals, m); err != nil {
			return nil, err
		}
	}
	seen := map[[3]string]bool{}
	for _, e := range rows {
		seen[[3]string{e.Suite, e.Task, e.Metric}] = true
	}
	more := slices.Clone(side[r])
	slices.SortStableFunc(more, func(a, b schemas.Eval) int { return cmp.Compare(b.N, a.N) })
	for _, e := range more {
		k := [3]string{e.Suite, e.Task, e.Metric}
		if !seen[k] {
			seen[k] = true
			rows = append(rows, e)
		}
	}
	return rows, nil
}

// Scores are the rows the report plots, by name "<suite>/<task> <metric>":
// reasoning_gym accuracy and every lm_eval metric whose value is in
// [0, 1] (format_rate, errors and unbounded metrics such as perplexity
// stay in the table only). nil when there is none.
func Scores(rows []schemas.Eval) map[string]float64 {
	var out map[string]float64
	for _, r := range rows {
		keep := r.Suite == "reasoning_gym" && r.Metric == "accuracy" || r.Suite == "lm_eval"
		if !keep || !(r.Value >= 0 && r.Value <= 1) {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[r.Suite+"/"+r.Task+" "+r.Metric] = r.Value
	}
	return out
}

// Settings is what an evaluation's scores depend on: the eval settings
// and what answers the agent role (backend, serving mode, model name, and
// the server's address when spade does not control it), and the
// evaluator's code (trainer.EvaluatorDigest), from the eval.* settings
// e and the model.* settings m (the agent's, m.ForRole). It is the eval
// stage's config subset and part of a side file's digest (SideDigest).
func Settings(e config.Eval, m config.Model) any {
	a := m.ForRole(config.RoleAgent)
	sub := struct {
		Eval                   config.Eval
		Backend, Serving, Name string
		BaseURL                string `json:",omitempty"`
		Evaluator              string
	}{Eval: e, Backend: a.Backend, Serving: a.Serving, Name: a.Name, Evaluator: trainer.EvaluatorDigest()}
	if !config.FromCheckpoints(a.Serving) {
		sub.BaseURL = a.BaseURL
	}
	return sub
}
