// Command spade runs SPADE self-play as staged batch jobs over versioned
// Parquet tables (README.md; docs/cli.md lists every command and the exit
// codes).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/datasets"
	"github.com/spade-pipeline/spade/internal/termtext"
	"github.com/spade-pipeline/spade/internal/textcut"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends"
)

// Exit codes (docs/cli.md), for Make, cron and Airflow.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitConflict    = 3
	exitBusy        = 4
	exitDifferent   = 1 // spade diff: the runs differ
	exitInterrupted = 130
	// exitInternal is a panic, a bug of spade (sysexits.h EX_SOFTWARE):
	// not Go's own exit 2 for an unrecovered panic, which would read as a
	// usage error, and which the Airflow DAG does not retry.
	exitInternal = 70
)

// firstLine is s up to its first newline, cut to n bytes (at a rune
// boundary) with "..." when longer.
func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > n {
		s = textcut.Prefix(s, n) + "..."
	}
	return s
}

// usageError marks errors in how spade was called (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// troubleError marks a failure of spade diff (a run that does not exist,
// a store that cannot be read): exit code 2 like diff(1)'s "trouble", so
// that no failure reads as exit 1, "the runs differ".
type troubleError struct{ err error }

func (t troubleError) Error() string { return t.err.Error() }
func (t troubleError) Unwrap() error { return t.err }

// exitError carries an explicit exit code with an optional message.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A closed output pipe (spade sql ... | head) turns into an EPIPE
	// error instead of killing the process, so deferred cleanup (the sql
	// temp directory, sandboxes) still runs.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	code := guarded(os.Stderr, func() int { return run(ctx, os.Args[1:]) })
	stopProfile()
	stop()
	os.Exit(code)
}

// guarded returns f's exit code, or exitInternal after writing the panic
// and its stack to w when f panics. It covers the command's own goroutine
// (and the worker pools, which pass a worker's panic on to it); a panic in
// another goroutine, or a fatal runtime error such as concurrent map
// writes, still ends the process with Go's exit code 2.
func guarded(w io.Writer, f func() int) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(w, "spade: internal error (a bug in spade, please report it): panic: %v\n%s", p, debug.Stack())
			code = exitInternal
		}
	}()
	return f()
}

func run(ctx context.Context, args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil || stdoutClosed(err) {
		// The reader of our output went away: nothing more to say.
		return exitOK
	}
	code := exitCode(ctx, err)
	if strings.HasPrefix(err.Error(), "unknown command ") {
		// cobra's error for a mistyped subcommand, which no Args
		// validator sees.
		code = exitUsage
	}
	msg := err.Error()
	if code == exitInterrupted {
		// One line, not one "context canceled" per part that was running.
		where, _, _ := strings.Cut(msg, "\n")
		where = strings.TrimSuffix(strings.TrimSuffix(where, context.Canceled.Error()), ": ")
		msg = "interrupted"
		if where != "" {
			msg += " (" + where + ")"
		}
		if c, _, ferr := root.Find(args); ferr == nil && writes[c.Name()] {
			msg += "; what was committed is kept: run the same command again to resume"
		}
	}
	if msg != "" {
		// Messages can quote data (a query's error, a model's text): each
		// line is shown with its control characters escaped.
		lines := strings.Split(msg, "\n")
		for i, l := range lines {
			lines[i] = termtext.Safe(l)
		}
		fmt.Fprintln(os.Stderr, "spade:", strings.Join(lines, "\n"))
	}
	return code
}

// stdoutClosed reports whether err is a write to standard output whose
// reader has gone (EPIPE on /dev/stdout), and not any other broken pipe:
// one from a sandbox or a storage connection is a real failure.
func stdoutClosed(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Op == "write" && pe.Path == os.Stdout.Name() && errors.Is(pe.Err, syscall.EPIPE)
}

// writes names the commands that commit to the store, whose interruption
// message says how to resume.
var writes = map[string]bool{"round": true, "stage": true, "commit": true, "import": true, "fork": true, "gc": true}

func exitCode(ctx context.Context, err error) int {
	var ee exitError
	var ue usageError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.As(err, new(troubleError)):
		return exitUsage
	case errors.Is(err, pipeline.ErrBusy):
		return exitBusy
	case errors.Is(err, pipeline.ErrConflict):
		return exitConflict
	case errors.As(err, &ue), errors.As(err, new(*pipeline.NotInRoundError)), errors.Is(err, config.ErrInvalid), errors.Is(err, storage.ErrUnknownScheme), errors.Is(err, storage.ErrInvalidKey),
		errors.Is(err, storage.ErrBadURL), errors.Is(err, datasets.ErrBadOptions):
		return exitUsage
	}
	return exitFailure
}

// globals are the flags every command shares.
type globals struct {
	configPath string
	storeURL   string
	runName    string
	logFormat  string
	logLevel   string
	cpuProfile string
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "spade",
		Short:         "SPADE self-play as staged jobs over versioned Parquet tables",
		Long:          "spade runs SPADE self-play (an LLM designs executable environments, plays them, scores them by hint-based regret and trains with GRPO) as staged, resumable batch jobs over versioned Parquet tables on local disk or S3.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.configPath, "config", envOr("SPADE_CONFIG", ""), "YAML config file (env SPADE_CONFIG; default: built-in defaults)")
	pf.StringVar(&g.storeURL, "store", envOr("SPADE_STORE", "file://./runs"), "store URL: file://DIR, s3://BUCKET/PREFIX?endpoint=..., mem://NAME (env SPADE_STORE)")
	pf.StringVar(&g.runName, "run", envOr("SPADE_RUN", "default"), "run name (env SPADE_RUN)")
	pf.StringVar(&g.logFormat, "log-format", envOr("SPADE_LOG_FORMAT", "text"), "log format: text or json (env SPADE_LOG_FORMAT)")
	pf.StringVar(&g.logLevel, "log-level", envOr("SPADE_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env SPADE_LOG_LEVEL)")
	pf.StringVar(&g.cpuProfile, "cpuprofile", "", "write a Go CPU profile of this invocation to FILE (for docs/benchmarks.md)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.cpuProfile == "" {
			return nil
		}
		f, err := os.Create(g.cpuProfile)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		stopProfile = func() {
			pprof.StopCPUProfile()
			f.Close()
		}
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// A query or file name that starts with "-" (a SQL comment, a
		// negative number) is parsed as a flag: say how to pass it.
		msg, tok := err.Error(), ""
		if rest, ok := strings.CutPrefix(msg, "unknown flag: "); ok {
			tok = rest
		} else if _, rest, ok := strings.Cut(msg, "' in "); ok && strings.HasPrefix(msg, "unknown shorthand flag") {
			tok = rest
		}
		if strings.ContainsAny(tok, " \n\t") || (len(tok) > 1 && tok[0] == '-' && tok[1] >= '0' && tok[1] <= '9') {
			return usagef("an argument that starts with '-' was read as a flag (%s); put -- before it: spade %s -- \"ARG\"", firstLine(msg, 80), c.Name())
		}
		return usageError{err}
	})
	root.AddCommand(
		newRoundCmd(g), newStageCmd(g), newCommitCmd(g), newStatusCmd(g), newSQLCmd(g),
		newCorpusCmd(g), newConfigCmd(g),
	)
	for _, extra := range extraCommands {
		root.AddCommand(extra(g))
	}
	usageArgs(root)
	return root
}

// usageArgs makes every command's argument-count errors usage errors
// (exit 2, docs/cli.md), as flag errors already are: cobra's validators
// return plain errors, which would exit 1, the code schedulers retry.
func usageArgs(c *cobra.Command) {
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		// A group such as `spade corpus`: cobra would print its help and
		// exit 0 for `spade corpus frobnicate`.
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		}
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				var ue usageError
				if errors.As(err, &ue) {
					return err
				}
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// stopProfile ends a --cpuprofile profile (a no-op without one).
var stopProfile = func() {}

// extraCommands lets command files register themselves (one file per
// subcommand) without editing the root.
var extraCommands []func(*globals) *cobra.Command

// app is what a command needs: config, store, logger.
type app struct {
	g     *globals
	cfg   config.Config
	src   config.Source
	store storage.Store
	log   *slog.Logger
}

func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", g.logFormat)
}

// open loads the config and opens the store.
func (g *globals) open(ctx context.Context) (*app, error) {
	log, err := g.logger()
	if err != nil {
		return nil, err
	}
	slog.SetDefault(log)
	cfg, src, err := config.Load(g.configPath, os.Environ())
	if err != nil {
		return nil, err
	}
	if err := pipeline.ValidateRunName(g.runName); err != nil {
		return nil, usageError{err}
	}
	st, err := storage.Open(ctx, g.storeURL)
	if err != nil {
		return nil, err
	}
	return &app{g: g, cfg: cfg, src: src, store: st, log: log}, nil
}

func (a *app) close() {
	if a.store != nil {
		_ = a.store.Close()
	}
}
