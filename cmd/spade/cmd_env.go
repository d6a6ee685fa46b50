package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/internal/termtext"
	"github.com/spade-pipeline/spade/pipeline/config"
)

// The env command registers itself through extraCommands, so the root needs
// no edit; of the shared globals it uses the config and the logger (it
// touches no store or run).
func init() {
	extraCommands = append(extraCommands, newEnvCmd)
}

// newEnvCmd implements `spade env check FILE.py [--json]`: the validate
// stage's checks (engines/envcheck, docs/method.md step 4) for one environment
// file, run in the same sandbox. Exit status: 0 when the environment is
// valid, 1 when it is not (an exitError with code exitFailure) or when
// --timeout ran out before the checks could tell (reason "timeout": the
// report and the message say so instead of blaming a check), 2 for usage
// errors and a FILE that cannot be read (missing, a directory); the
// report goes to stdout either way. The sandbox is the validate stage's:
// sandbox.* from --config and SPADE_SANDBOX_* (call timeout, memory,
// interpreter, strict, fork_episodes), one worker; --python and --strict
// override the config.
func newEnvCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Work with environment programs (the spade_env contract)",
	}
	var (
		asJSON  bool
		strict  bool
		python  string
		seeds   []int64
		timeout time.Duration
		quick   bool
	)
	check := &cobra.Command{
		Use:   "check FILE.py",
		Short: "Validate one environment file in the sandbox; exit 0 if valid, 1 if not, 2 if unreadable",
		Long: "Runs every validation check of the validate stage on FILE.py inside the sandbox " +
			"(compile, class discovery, reset on several seeds, probe steps with malformed and plausible " +
			"actions, 5-tuple types, finite in-range rewards, bounded text observations, episode end, " +
			"no leftover processes, determinism; for tool use the reset gate and impossibility screening) " +
			"and prints each check's result. See docs/environment-contract.md.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("env check: want exactly one FILE.py, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			src, err := os.ReadFile(path)
			if err != nil {
				// Exit 2, not 1: 1 says the file is not a valid
				// environment. The PathError names the file already.
				return usageError{fmt.Errorf("env check: %w", err)}
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, _, err := config.Load(g.configPath, os.Environ())
			if err != nil {
				return err
			}
			cfg.Workers = 1
			if python != "" {
				if !filepath.IsAbs(python) {
					return usagef("env check: --python must be an absolute path (got %q)", python)
				}
				cfg.Sandbox.Python = python
			}
			cfg.Sandbox.Strict = cfg.Sandbox.Strict || strict
			eng := &engine.Engines{Config: &cfg, Log: log}
			defer eng.Close()
			sb, err := eng.Sandbox()
			if err != nil {
				return fmt.Errorf("env check: start %w", err)
			}
			opts := envcheck.Options{Seeds: seeds, Timeout: timeout}
			limit := timeout
			if limit <= 0 {
				limit = envcheck.DefaultTimeout
			}
			var rep envcheck.Report
			if quick {
				rep = envcheck.QuickCheck(cmd.Context(), sb, string(src), opts)
			} else {
				rep = envcheck.Check(cmd.Context(), sb, string(src), opts)
			}
			if err := cmd.Context().Err(); err != nil {
				// Interrupted: the checks it cut short say nothing of the file.
				return fmt.Errorf("env check %s: %w", path, err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					File string `json:"file"`
					envcheck.Report
				}{path, rep}); err != nil && !stdoutClosed(err) {
					// A reader that has gone does not make an invalid
					// file valid: the verdict below decides the exit code.
					return fmt.Errorf("env check: write report: %w", err)
				}
			} else {
				printEnvReport(out, path, rep, limit)
			}
			if rep.Reason == envcheck.ReasonTimeout {
				return exitError{code: exitFailure, msg: fmt.Sprintf("%s was not shown valid: %s; rerun with a longer --timeout", path, timeoutText(rep, limit))}
			}
			if !rep.Valid {
				return exitError{code: exitFailure, msg: fmt.Sprintf("%s is not a valid environment (failed check: %s)", path, rep.Reason)}
			}
			return nil
		},
	}
	f := check.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&quick, "quick", false, "run only the quick checks the design stage uses between retries")
	f.BoolVar(&strict, "strict", false, "refuse to run without bubblewrap isolation (or sandbox.strict)")
	f.StringVar(&python, "python", "", "Python interpreter inside the sandbox (default sandbox.python, /usr/bin/python3)")
	f.Int64SliceVar(&seeds, "seeds", nil, "reset seeds to test (default 0,1,2; at least 3 are used)")
	// pflag takes "[]" for an empty int64 slice as a non-zero default and
	// would add "(default [])" after the real default named above.
	f.Lookup("seeds").DefValue = ""
	f.DurationVar(&timeout, "timeout", 0, "limit for the whole validation (default 60s); when it runs out the file is not shown valid (exit 1, reason timeout)")
	cmd.AddCommand(check)
	return cmd
}

// timeoutText says that the check of rep ran past --timeout limit, and
// during which check.
func timeoutText(rep envcheck.Report, limit time.Duration) string {
	return fmt.Sprintf("the check did not finish within --timeout %s (it stopped during check %s)", limit, rep.Stopped)
}

// printEnvReport writes the human-readable report: a verdict line, then one
// line per check (PASS, FAIL or SKIP, or STOP for the check --timeout
// limit cut short; phase time, detail), with the failing check's
// traceback tail indented below it. Text from the program is shown
// through termtext.Safe.
func printEnvReport(w io.Writer, path string, rep envcheck.Report, limit time.Duration) {
	verdict := "VALID"
	switch {
	case rep.Reason == envcheck.ReasonTimeout:
		verdict = "NOT SHOWN VALID (" + rep.Reason + "): " + timeoutText(rep, limit)
	case !rep.Valid:
		verdict = "INVALID (" + rep.Reason + ")"
	}
	fmt.Fprintf(w, "%s: %s", termtext.Safe(path), verdict)
	if m := rep.Meta; m != nil {
		fmt.Fprintf(w, "  [%s class %s, name %q, skill %q, max_turns %d", termtext.Safe(m.Kind), termtext.Safe(m.Class), m.Name, m.Skill, m.MaxTurns)
		if len(m.RewardRange) == 2 {
			fmt.Fprintf(w, ", reward_range [%g, %g]", m.RewardRange[0], m.RewardRange[1])
		}
		if len(m.Tools) > 0 {
			var tools []struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(m.Tools, &tools) == nil {
				names := make([]string, len(tools))
				for i, t := range tools {
					names[i] = t.Name
				}
				fmt.Fprintf(w, ", tools %s", termtext.Safe(strings.Join(names, ", ")))
			}
		}
		fmt.Fprint(w, "]")
	}
	fmt.Fprintln(w)
	for _, r := range rep.Checks {
		status := "PASS"
		switch {
		case r.Skipped:
			status = "SKIP"
		case !r.Passed && rep.Reason == envcheck.ReasonTimeout && r.Name == rep.Stopped:
			status = "STOP"
		case !r.Passed:
			status = "FAIL"
		}
		detail := r.Detail
		if r.ErrorKind != "" && !r.Passed {
			detail += " [" + r.ErrorKind + "]"
		}
		fmt.Fprintf(w, "  %s %-14s %8s  %s\n", status, r.Name, r.Duration.Round(time.Millisecond), termtext.Safe(detail))
		if !r.Passed && r.TracebackTail != "" {
			for _, line := range strings.Split(strings.TrimRight(r.TracebackTail, "\n"), "\n") {
				fmt.Fprintf(w, "       | %s\n", termtext.Safe(line))
			}
		}
	}
	fmt.Fprintf(w, "  total %s\n", rep.Duration.Round(time.Millisecond))
}
