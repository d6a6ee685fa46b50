package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/poolimport"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/corpus"
	"github.com/spade-pipeline/spade/stages/validate"
)

// The pool command registers itself through extraCommands.
func init() {
	extraCommands = append(extraCommands, newPoolCmd)
}

// poolImportJSON is what `pool import --json` prints: whether the run
// already held this pool, the counts, the invalid environments with their
// reasons and the duplicates left out, or the error of a failed import.
type poolImportJSON struct {
	AlreadyImported bool          `json:"already_imported"`
	Environments    int           `json:"environments"`
	Valid           int           `json:"valid"`
	Invalid         []invalidJSON `json:"invalid"`
	Error           string        `json:"error,omitempty"`
	*poolimport.Report
}

// invalidJSON is one environment that failed validation.
type invalidJSON struct {
	ID     string `json:"id"`
	EnvID  string `json:"env_id"`
	Reason string `json:"reason"`
}

// newPoolCmd implements `spade pool import PATH...`: a fixed environment
// pool committed at round 0 of a run under design.mode fixed_pool
// (docs/cli.md, docs/recipes.md "Fixed-pool baselines").
func newPoolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "Manage a fixed environment pool (design.mode fixed_pool)"}
	var opts poolimport.Options
	var asJSON bool
	imp := &cobra.Command{
		Use:   "import PATH...",
		Short: "Import environment programs (directories of *.py, JSONL or Parquet with a source column) as the run's fixed pool (round 0)",
		Long: `Import a fixed environment pool into a run whose config sets design.mode:
fixed_pool. PATHs are directories (every *.py file under them, in path
order; the id is the path under the directory), .py files, JSONL(.gz)
files with one JSON object per line, or Parquet files, one environment per
row: column source (the Python program, required), id (optional, default
FILE#ROW) and skill (optional; default the class's skill attribute, then
--skill). Every environment is validated in the sandbox exactly as the
validate stage validates a designed one; round 0 then holds validations,
environments (valid or not, with the reason) and pool (the valid ones),
besides the embedded corpus, and is sealed. Bad input (a row without a
string source, a malformed line, two different sources with one id) fails the
import naming the file, row and field, and nothing is committed. Later
copies of a source (the same env_id) are left out and listed.
Importing the same environments again does nothing; a run whose round 0
is sealed without this pool is refused (exit 3): use a new --run.

Example:
  spade --config configs/baseline-fixed-pool.yaml --run fixed pool import my-envs/
  spade --config configs/baseline-fixed-pool.yaml --run fixed round 1`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			opts.Paths = args
			var rep poolimport.Report // what was read, also in a failure's JSON
			fail := func(err error) error {
				if asJSON {
					_ = json.NewEncoder(os.Stdout).Encode(poolImportJSON{Error: err.Error(), Invalid: []invalidJSON{}, Report: &rep})
				}
				return err
			}
			if err := opts.CheckOptions(); err != nil {
				return fail(usagef("pool import: %v", err))
			}
			a, err := g.open(ctx)
			if err != nil {
				return fail(err)
			}
			defer a.close()
			if !a.cfg.FixedPool() {
				return fail(usagef("pool import: the run's config has design.mode %s; a fixed pool is played only under design.mode: fixed_pool (see configs/baseline-fixed-pool.yaml)", a.cfg.Design.Mode))
			}
			if err := preflight(ctx, &a.cfg, a.store, a.log, checkConfig); err != nil {
				return fail(err)
			}
			entries, read, err := poolimport.Read(ctx, opts)
			rep = read
			var pe *poolimport.PathError
			if errors.As(err, &pe) {
				return fail(usageError{err})
			}
			if err != nil {
				return fail(fmt.Errorf("pool import: %w", err))
			}
			eng := &engine.Engines{Config: &a.cfg, Store: a.store, Log: a.log}
			defer eng.Close()
			st := &validate.PoolImport{Eng: eng, Entries: entries, Skill: opts.Skill}
			r := &pipeline.Runner{Store: a.store, Run: g.runName, Config: a.cfg, Stages: []pipeline.Stage{corpus.Embedded{WithPool: true}, st}, Log: a.log}
			res, err := r.RunRound(ctx, 0)
			if err != nil {
				return fail(err)
			}
			m, err := pipeline.ReadManifest(ctx, a.store, pipeline.ManifestKey(g.runName, 0, "environments"))
			if res.AlreadySealed || len(res.Ran) == 0 {
				if err == nil && m.Stage == st.Name() && m.StageFingerprint == r.FingerprintOf(ctx, st, 0) {
					out, err := poolSummary(cmd, a, m, &rep, true)
					if err != nil {
						return err
					}
					if asJSON {
						return json.NewEncoder(os.Stdout).Encode(out)
					}
					fmt.Printf("pool of run %s already imported (%d environments, %d valid); nothing to do\n", g.runName, out.Environments, out.Valid)
					return nil
				}
				return fail(exitError{exitConflict, fmt.Sprintf("round 0 of run %s is already sealed without this pool (a corpus or another pool was committed, or round 1 ran); import the pool into a new run (--run NEW) before its first round", g.runName)})
			}
			if err != nil {
				return err
			}
			out, err := poolSummary(cmd, a, m, &rep, false)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(out)
			}
			fmt.Printf("imported %d environments into run %s: %d valid (the pool), %d invalid, %d duplicates left out (read %d from %d files)\n",
				out.Environments, g.runName, out.Valid, len(out.Invalid), len(rep.Duplicates), rep.Read, rep.Files)
			for _, iv := range out.Invalid {
				fmt.Printf("  invalid %s (env_id %s): %s\n", iv.ID, iv.EnvID, iv.Reason)
			}
			for _, d := range rep.Duplicates {
				fmt.Printf("  duplicate %s\n", d)
			}
			if out.Valid == 0 {
				return fmt.Errorf("pool import: no environment of run %s is valid: its rounds would play nothing (see its validations table)", g.runName)
			}
			return nil
		},
	}
	f := imp.Flags()
	f.StringVar(&opts.Format, "format", poolimport.FormatAuto, "input format: auto (by extension; a directory is dir), dir, py, jsonl or parquet")
	f.StringVar(&opts.Skill, "skill", "", "skill of environments whose row and class name none (default "+poolimport.DefaultSkill+")")
	f.BoolVar(&asJSON, "json", false, "print the import report as JSON")
	cmd.AddCommand(imp)
	return cmd
}

// poolSummary counts the committed environments of round 0 (manifest m)
// and lists the invalid ones with their reasons.
func poolSummary(cmd *cobra.Command, a *app, m *pipeline.Manifest, rep *poolimport.Report, already bool) (poolImportJSON, error) {
	envs, err := pipeline.ReadManifestRows(cmd.Context(), a.store, schemas.Environments, m)
	if err != nil {
		return poolImportJSON{}, err
	}
	out := poolImportJSON{AlreadyImported: already, Environments: len(envs), Invalid: []invalidJSON{}, Report: rep}
	for _, e := range envs {
		if e.Valid {
			out.Valid++
		} else {
			out.Invalid = append(out.Invalid, invalidJSON{ID: e.SlotID, EnvID: e.EnvID, Reason: e.Reason})
		}
	}
	return out, nil
}
