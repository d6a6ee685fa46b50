package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline/config"
)

func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the configuration"}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show",
		Short: "Print every setting with its value and where it came from (default, file, environment)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, err := config.Load(g.configPath, os.Environ())
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
			fmt.Printf("# store = %s  (--store / SPADE_STORE)\n# run = %s  (--run / SPADE_RUN)\n# recipe = %s\n# config digest = %s\n", g.storeURL, g.runName, recipe, cfg.Digest())
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
