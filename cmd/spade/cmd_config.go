package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// sourceRun is the source config show names for a value read from a run's
// pinned config (<run>/_RUN.json) rather than from this invocation.
const sourceRun = "run"

func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the configuration"}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show",
		Short: "Print every setting with its value and where it came from (default, file, environment, or the run's pinned config)",
		Long: `Print every setting with its value and where it came from.

With --run (or SPADE_RUN) naming a run that exists in the store, the
values are the run's pinned config (<run>/_RUN.json, source "run"), the
one its rounds are made with; a comment line says when this invocation's
config (defaults, --config, SPADE_*) differs from it, since a round with
that config would be refused (exit 3). Otherwise the values are this
invocation's config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, err := config.Load(g.configPath, os.Environ())
			if err != nil {
				return err
			}
			digest, notes, err := g.pinnedConfig(cmd, &cfg, &src)
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					Key    string `json:"key"`
					Value  string `json:"value"` // the value as JSON text
					Source string `json:"source"`
					Env    string `json:"env"`
				}
				var rows []row
				for _, k := range config.Keys() {
					rows = append(rows, row{k, cfg.Get(k), src[k], config.EnvName(k)})
				}
				return json.NewEncoder(os.Stdout).Encode(rows)
			}
			recipe := cfg.Recipe
			if recipe == "" {
				recipe = "(none: a config of your own; configs/*.yaml are the recipes, docs/recipes.md)"
			}
			fmt.Printf("# store = %s  (--store / SPADE_STORE)\n# run = %s  (--run / SPADE_RUN)\n# recipe = %s\n# config digest = %s\n", g.storeURL, g.runName, recipe, digest)
			for _, n := range notes {
				fmt.Println("# " + n)
			}
			for _, line := range config.Show(cfg, src) {
				fmt.Println(line)
			}
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.AddCommand(show)
	return cmd
}

// pinnedConfig replaces *cfg and *src by the pinned config of the run that
// --run or SPADE_RUN names, when the run exists, and returns the digest of
// the config shown and comment lines saying which config it is. Without an
// explicit run, or for a run not created yet, *cfg stays this invocation's.
// Errors: an invalid run name (usage), the store cannot be opened or read,
// a run file that is malformed or whose config does not match its digest
// (pipeline.ErrIntegrity).
func (g *globals) pinnedConfig(cmd *cobra.Command, cfg *config.Config, src *config.Source) (string, []string, error) {
	own := cfg.Digest()
	if f := cmd.Flag("run"); (f == nil || !f.Changed) && os.Getenv("SPADE_RUN") == "" {
		return own, nil, nil
	}
	if err := pipeline.ValidateRunName(g.runName); err != nil {
		return "", nil, usageError{err}
	}
	ctx := cmd.Context()
	st, err := storage.Open(ctx, g.storeURL)
	if err != nil {
		return "", nil, err
	}
	defer st.Close()
	rf, err := pipeline.ReadRunFile(ctx, st, g.runName)
	if errors.Is(err, pipeline.ErrNotCommitted) {
		return own, []string{fmt.Sprintf("run %s does not exist yet: this invocation's config, which its first round would pin", g.runName)}, nil
	}
	if err != nil {
		return "", nil, err
	}
	if err := rf.VerifyConfig(); err != nil {
		return "", nil, err
	}
	notes := []string{fmt.Sprintf("the pinned config of run %s (%s), the one its rounds are made with", g.runName, pipeline.RunFileKey(g.runName))}
	if own != rf.ConfigDigest {
		notes = append(notes, fmt.Sprintf("this invocation's config (defaults, --config, SPADE_*) differs from it (digest %s): a round of run %s with it is refused (exit 3); use a new --run or spade fork", own, g.runName))
	}
	*cfg = rf.Config
	pinned := config.Source{}
	for _, k := range config.Keys() {
		pinned[k] = sourceRun
	}
	*src = pinned
	return rf.ConfigDigest, notes, nil
}
