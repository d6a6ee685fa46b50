package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/pipeline/storage/s3store"
	"github.com/spade-pipeline/spade/stages/all"
)

func init() {
	extraCommands = append(extraCommands, newDagCmd)
}

// exitSkip is what `spade dag runs-at` returns for a stage that does not
// run at a round: Airflow's BashOperator marks a task that exits 99 as
// skipped (its skip_on_exit_code default).
const exitSkip = 99

// defaultSharded are the stages whose work is split into parts meant for
// separate workers (docs/design.md "Shardable stages").
var defaultSharded = []string{"design", "validate", "rollout"}

// dagNode is one stage of the task graph of a round.
type dagNode struct {
	Stage string
	// Round0 marks a stage of the run's setup round (the corpus), which a
	// DAG run makes sure is committed and sealed before round N.
	Round0 bool
	// Sharded stages become a mapped task over shards plus a commit task.
	Sharded bool
	// Every is true when the stage also runs at non-regeneration rounds.
	Every bool
	// After lists the stages whose tables this one reads, sorted.
	After []string
}

// Kind is the node's word in the DAG file's "# spade-dag" block: round0,
// sharded or stage.
func (n dagNode) Kind() string {
	switch {
	case n.Round0:
		return "round0"
	case n.Sharded:
		return "sharded"
	}
	return "stage"
}

// stageGraph is the task graph of one round, read off the round plans
// (pipeline.PlanRound) of round 0 and of a regeneration round (1 +
// regenerate_every, so that no first-round special case shows): the
// stages that run at round 0 come first, then those of the regeneration
// round, each in its plan's order. Stage s follows stage t when s reads a
// table t writes at the same round (the plan's After, t running there),
// or at round 0 (t the writer of round 0's plan, running there). Inputs of
// earlier rounds are the previous DAG run's. A stage's Every comes from
// the plan of the round after the regeneration round.
func stageGraph(stages []pipeline.Stage, cfg *config.Config, sharded []string) ([]dagNode, error) {
	regen := 1 + cfg.RegenerateEvery
	var plans [3]*pipeline.RoundPlan
	for i, round := range []int{0, regen, regen + 1} {
		p, err := pipeline.PlanRound(stages, cfg, pipeline.NewRoundInfo("dag", round, cfg))
		if err != nil {
			return nil, fmt.Errorf("the stage graph of round %d: %w", round, err)
		}
		plans[i] = p
	}
	// plain is a round that does not regenerate, when the schedule has one.
	plan0, plan, plain := plans[0], plans[1], plans[2]
	var nodes []dagNode
	index := map[string]int{}
	for _, ps := range plan0.Running() {
		if plan.Runs(ps.Name) {
			return nil, fmt.Errorf("stage %s runs at round 0 and at round %d: a DAG task per stage cannot express that", ps.Name, regen)
		}
		index[ps.Name] = len(nodes)
		nodes = append(nodes, dagNode{Stage: ps.Name, Round0: true})
	}
	for _, ps := range plan.Running() {
		n := dagNode{Stage: ps.Name, Sharded: slices.Contains(sharded, ps.Name), Every: plain.Runs(ps.Name) || plain.Round.Regeneration}
		for _, a := range ps.After {
			if plan.Runs(a) {
				n.After = append(n.After, a)
			}
		}
		for _, in := range ps.Inputs {
			if w, ok := plan0.Writer(in.Table); ok && in.Round == 0 && plan0.Runs(w) && w != ps.Name && !slices.Contains(n.After, w) {
				n.After = append(n.After, w)
			}
		}
		slices.Sort(n.After)
		index[ps.Name] = len(nodes)
		nodes = append(nodes, n)
	}
	for _, name := range sharded {
		i, ok := index[name]
		if !ok && cfg.FixedPool() && slices.ContainsFunc(stages, func(s pipeline.Stage) bool { return s.Name() == name }) {
			// Under design.mode fixed_pool the generation stages run at no
			// round and have no task to shard.
			continue
		}
		if !ok {
			names := make([]string, 0, len(stages))
			for _, s := range stages {
				names = append(names, s.Name())
			}
			return nil, fmt.Errorf("--sharded %q: no such stage (stages: %s)", name, strings.Join(names, ", "))
		}
		if nodes[i].Round0 {
			return nil, fmt.Errorf("--sharded %q: the round-0 stage runs as one task; shard stages that run at a regeneration round", name)
		}
	}
	if !slices.ContainsFunc(nodes, func(n dagNode) bool { return n.Every }) {
		return nil, fmt.Errorf("no stage runs at every round, so no task can seal a round")
	}
	return nodes, nil
}

func newDagCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dag",
		Short: "Generate workflow definitions (Airflow) that run rounds as one task per stage and shard",
	}
	cmd.AddCommand(newDagAirflowCmd(g), newDagRunsAtCmd(g))
	return cmd
}

// airflowOpts are the knobs of the generated Airflow DAG.
type airflowOpts struct {
	DagID      string
	Spade      string
	Shards     int
	Retries    int
	RetryDelay int // seconds
	Sharded    []string
	// Env is exported to every task (SPADE_STORE, SPADE_RUN, SPADE_CONFIG).
	Env map[string]string
	// Schedule, when set, makes the DAG a scheduled one: each DAG run
	// does `spade round next` (a cron expression or an Airflow preset
	// such as "@daily").
	Schedule string
	// LeaseTTL is --lease-ttl of the scheduled DAG's `spade round next`
	// (seconds).
	LeaseTTL float64
	// Track adds a task after the seal that logs the round to the
	// trackers of observe.trackers (`spade track`), when there are any.
	Track bool
}

// airflowPresets are the schedule presets of Airflow's cron timetable
// that repeat (Airflow's "@once" and "@continuous" are left out: a
// scheduled spade DAG runs one round per interval).
var airflowPresets = []string{"@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly", "@annually", "@midnight"}

// checkSchedule accepts a repeating Airflow preset or a five-field cron
// expression of the characters cron uses; Airflow parses the expression
// itself when it loads the DAG (croniter), so this only catches what is
// plainly not a schedule before the file is written.
func checkSchedule(s string) error {
	if slices.Contains(airflowPresets, s) {
		return nil
	}
	fields := strings.Fields(s)
	if len(fields) != 5 || strings.IndexFunc(s, func(c rune) bool {
		return !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || strings.ContainsRune("*/,-? ", c))
	}) >= 0 {
		return usagef("--schedule %q: want a five-field cron expression (\"0 3 * * *\") or one of %s", s, strings.Join(airflowPresets, ", "))
	}
	return nil
}

// check validates the flags (a usage error naming the flag):
// counts, the schedule, --lease-ttl (leaseTTLSet: given on the command
// line, which only a scheduled DAG takes) and the dag_id.
func (o *airflowOpts) check(leaseTTLSet bool) error {
	switch {
	case o.Shards < 1:
		return usagef("--shards %d: want >= 1", o.Shards)
	case o.Retries < 0:
		return usagef("--retries %d: want >= 0", o.Retries)
	case o.RetryDelay < 0:
		return usagef("--retry-delay %d: want >= 0 (seconds)", o.RetryDelay)
	}
	if leaseTTLSet && o.Schedule == "" {
		return usagef("--lease-ttl applies to a scheduled DAG (--schedule) only: the DAG of one round per trigger takes no lease")
	}
	if o.Schedule != "" {
		if err := checkSchedule(o.Schedule); err != nil {
			return err
		}
		if !(o.LeaseTTL > 0) || math.IsInf(o.LeaseTTL, 1) || o.LeaseTTL*float64(time.Second) >= math.MaxInt64 {
			return usagef("--lease-ttl %g: want a number of seconds > 0 (and below 292 years)", o.LeaseTTL)
		}
	}
	if !isIdentifier(o.DagID) {
		return usagef("--dag-id %q: use letters, digits and '_', not starting with a digit", o.DagID)
	}
	return nil
}

func newDagAirflowCmd(g *globals) *cobra.Command {
	o := airflowOpts{}
	var out string
	cmd := &cobra.Command{
		Use:   "airflow [--out FILE]",
		Short: "Write an Airflow DAG file: one round per trigger (a task per stage, shards mapped, a seal), or with --schedule the next round per interval",
		Long: `Write an Airflow 2 (>= 2.4) DAG as Python: one BashOperator per stage
calling "spade stage NAME --round {{ params.round }}", the sharded stages
(design, validate, rollout) as dynamic task mapping over the param
"shards" followed by "spade commit", and a final seal. The task
dependencies are the stage DAG, derived from the stages' declared inputs
and outputs. The store, run and config of this invocation are exported
to every task. A task whose spade command exits 2 (usage) or 3
(conflict) fails without retries; other failures are retried --retries
times. Trigger one DAG run per round, in order:
  airflow dags trigger spade_round --conf '{"round": 3, "shards": 8}'

With --schedule CRON the DAG is a scheduled one instead: every DAG run
(one per schedule interval, catchup off, one at a time) runs "spade
round next", which does the first round of the run that is not sealed,
all its stages in one process, under the run's lease; exit 4 (another
"round next" holds the lease) marks that DAG run's task skipped. Both
files import Airflow 3's modules (airflow.sdk, the standard provider)
and fall back to Airflow 2's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(cmd.Flags().Changed("lease-ttl")); err != nil {
				return err
			}
			// The DAG is rendered without opening the store: the machine
			// that renders it (a CI job, a laptop) need not reach the store
			// or hold its credentials. The URL is still checked here.
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, _, err := config.Load(g.configPath, os.Environ())
			if err != nil {
				return err
			}
			if err := pipeline.ValidateRunName(g.runName); err != nil {
				return usageError{err}
			}
			store, err := dagStoreURL(g.storeURL)
			if err != nil {
				return err
			}
			if err := preflight(cmd.Context(), &cfg, nil, log, checkConfig); err != nil {
				return err
			}
			eng := &engine.Engines{Config: &cfg, Log: log}
			defer eng.Close()
			nodes, err := stageGraph(all.Stages(eng), &cfg, o.Sharded)
			if err != nil {
				return usageError{err}
			}
			o.Env = map[string]string{"SPADE_STORE": store, "SPADE_RUN": g.runName}
			o.Track = len(cfg.Observe.Trackers) > 0
			if g.configPath != "" {
				abs, err := filepath.Abs(g.configPath)
				if err != nil {
					return err
				}
				o.Env["SPADE_CONFIG"] = abs
			}
			src := airflowDAG(nodes, o)
			if o.Schedule != "" {
				src = airflowScheduledDAG(o)
			}
			if out == "" || out == "-" {
				_, err = os.Stdout.WriteString(src)
				return err
			}
			if err := os.WriteFile(out, []byte(src), 0o644); err != nil {
				return err
			}
			if o.Schedule != "" {
				fmt.Printf("wrote %s: the next round per schedule %s (spade round next)\n", out, o.Schedule)
				return nil
			}
			shardedTasks := 0
			for _, n := range nodes {
				if n.Sharded {
					shardedTasks++
				}
			}
			fmt.Printf("wrote %s: %d stages, %d sharded\n", out, len(nodes), shardedTasks)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "write the DAG to FILE (default stdout)")
	f.StringVar(&o.DagID, "dag-id", "spade_round", "Airflow dag_id")
	f.StringVar(&o.Spade, "spade", "spade", "path of the spade binary on the Airflow workers")
	f.IntVar(&o.Shards, "shards", 4, "default of the DAG param shards (shards per sharded stage)")
	f.IntVar(&o.Retries, "retries", 2, "task retries after a failure a retry can fix (exit 1, 130); exit 2 and 3 fail a task at once")
	f.IntVar(&o.RetryDelay, "retry-delay", 300, "seconds between task retries")
	f.StringSliceVar(&o.Sharded, "sharded", defaultSharded, "stages run as mapped shard tasks")
	f.StringVar(&o.Schedule, "schedule", "", "write a scheduled DAG instead: each run does `spade round next` under the run's lease (cron expression or @daily, @hourly, ...)")
	f.Float64Var(&o.LeaseTTL, "lease-ttl", 6*3600, "with --schedule: --lease-ttl of `spade round next` (seconds)")
	return cmd
}

func newDagRunsAtCmd(g *globals) *cobra.Command {
	var round int
	cmd := &cobra.Command{
		Use:   "runs-at STAGE --round N",
		Short: "Exit 0 when STAGE runs at round N, 99 when it does not (Airflow marks the task skipped)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("runs-at needs one stage name")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if round < 0 {
				return usagef("--round N is required, N >= 0 (got %d)", round)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			r, eng := a.runner()
			defer eng.Close()
			s, err := r.StageByName(args[0])
			if err != nil {
				return usageError{err}
			}
			if _, runs := s.Plan(pipeline.NewRoundInfo(g.runName, round, &a.cfg), &a.cfg); !runs {
				fmt.Printf("stage %s does not run at round %d: skipped\n", args[0], round)
				return exitError{code: exitSkip}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&round, "round", -1, "round number")
	return cmd
}

func isIdentifier(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// pyStr renders s as a Python string literal (JSON string syntax is a
// subset of Python's), with '&', '<' and '>' as themselves rather than
// JSON's HTML-safe \u escapes, so an S3 URL's query stays readable.
func pyStr(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		safe := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=@%+,", c)
		return !safe
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// exitNoRetry are the exit codes of spade that the same command returns
// again on a retry (docs/cli.md "Exit codes"), with their meaning: the
// DAG's tasks fail at once on them instead of retrying.
var exitNoRetry = map[int]string{exitUsage: "usage error", exitConflict: "conflict"}

// airflowTemplate is dag_airflow.py.tmpl: its templates "round" and
// "scheduled" render the two DAG files from an airflowFile.
//
//go:embed dag_airflow.py.tmpl
var airflowTemplateText string

var airflowTemplate = template.Must(template.New("dag_airflow.py.tmpl").Parse(airflowTemplateText))

// airflowFile is the data of dag_airflow.py.tmpl. Fields ending in Py,
// and every ID, Command and Value, are Python literals (pyStr); Var
// fields are Python identifiers (taskVar).
type airflowFile struct {
	// DagID is the dag_id as given (the docstring's trigger example);
	// DagIDPy the same as a literal.
	DagID, DagIDPy string
	// Shards, Retries and RetryDelay (seconds) are the airflowOpts'.
	Shards, Retries, RetryDelay int
	// NoRetry is NO_RETRY_EXIT_CODES (exitNoRetry), codes increasing;
	// Env is SPADE_ENV, keys sorted.
	NoRetry, Env []pyItem
	// Graph are the nodes of the "# spade-dag" block.
	Graph []dagNode
	// Tasks are the stage tasks then round0_seal and seal; Final the
	// tasks after a blank line (track); Edges the ">>" lines, as task
	// variables.
	Tasks, Final []airflowTask
	Edges        [][2]string
	// SchedulePy, RoundNext (the command) and SkipCodes are the scheduled
	// DAG's.
	SchedulePy, RoundNext string
	SkipCodes             [2]int
}

// pyItem is one key: value of a Python dict literal, both rendered.
type pyItem struct{ Key, Value string }

// airflowTask is one task of the one-round DAG: a SpadeBashOperator, or,
// with ShardList set, a mapped one over ShardList (a @task building the
// shard list) followed by Commit.
type airflowTask struct {
	Stage, Var, ID, Command string
	ShardList, Commit       *airflowTask
}

// newAirflowFile is the part of airflowFile both DAG files use.
func newAirflowFile(o airflowOpts) *airflowFile {
	f := &airflowFile{DagID: o.DagID, DagIDPy: pyStr(o.DagID), Shards: o.Shards, Retries: o.Retries, RetryDelay: o.RetryDelay}
	codes := make([]int, 0, len(exitNoRetry))
	for c := range exitNoRetry {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		f.NoRetry = append(f.NoRetry, pyItem{strconv.Itoa(c), pyStr(exitNoRetry[c])})
	}
	keys := make([]string, 0, len(o.Env))
	for k := range o.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f.Env = append(f.Env, pyItem{pyStr(k), pyStr(o.Env[k])})
	}
	return f
}

// render executes the template called name with f.
func (f *airflowFile) render(name string) string {
	var b strings.Builder
	if err := airflowTemplate.ExecuteTemplate(&b, name, f); err != nil {
		panic(fmt.Sprintf("dag_airflow.py.tmpl: %v", err)) // a bug of the template, not of the input
	}
	return b.String()
}

// taskVar is the Python variable of a task.
func taskVar(task string) string { return "t_" + task }

// bashTask is a plain task: id (also its variable's name) runs command.
func bashTask(id, command string) airflowTask {
	return airflowTask{Stage: id, Var: taskVar(id), ID: pyStr(id), Command: pyStr(command)}
}

// airflowDAG renders the DAG file. Task names: a stage's task is named
// after it; a sharded stage S has S_shards (the shard list), S (mapped)
// and S_commit; round0_seal seals the setup round; seal seals round N.
// The "# spade-dag" comment block states the stage graph for tools and
// tests; the ">>" lines are what Airflow executes.
func airflowDAG(nodes []dagNode, o airflowOpts) string {
	f := newAirflowFile(o)
	f.Graph = nodes
	spade := shQuote(o.Spade)
	roundArg := "--round {{ params.round }}"
	// The seal task commits (a no-op) and seals through the last stage
	// that runs at every round.
	var lastStage string
	var round0 []string
	for _, n := range nodes {
		if n.Every {
			lastStage = n.Stage
		}
		check := fmt.Sprintf("%s dag runs-at %s %s || exit $?; ", spade, n.Stage, roundArg)
		switch {
		case n.Round0:
			f.Tasks = append(f.Tasks, bashTask(n.Stage, fmt.Sprintf("%s stage %s --round 0", spade, n.Stage)))
			round0 = append(round0, n.Stage)
		case n.Sharded:
			t := bashTask(n.Stage, check+fmt.Sprintf("%s stage %s %s --shard \"$SPADE_SHARD\"", spade, n.Stage, roundArg))
			list := bashTask(n.Stage+"_shards", "")
			commit := bashTask(n.Stage+"_commit", check+fmt.Sprintf("%s commit %s --stage %s", spade, roundArg, n.Stage))
			t.ShardList, t.Commit = &list, &commit
			f.Tasks = append(f.Tasks, t)
			f.Edges = append(f.Edges, [2]string{taskVar(n.Stage), taskVar(n.Stage + "_commit")})
		default:
			f.Tasks = append(f.Tasks, bashTask(n.Stage, check+fmt.Sprintf("%s stage %s %s", spade, n.Stage, roundArg)))
		}
	}
	if len(round0) > 0 {
		f.Tasks = append(f.Tasks, bashTask("round0_seal", fmt.Sprintf("%s commit --round 0 --stage %s --seal", spade, round0[len(round0)-1])))
	}
	f.Tasks = append(f.Tasks, bashTask("seal", fmt.Sprintf("%s commit %s --stage %s --seal", spade, roundArg, lastStage)))
	edges := stageEdges(nodes, round0)
	if o.Track {
		f.Final = append(f.Final, bashTask("track", fmt.Sprintf("%s track %s", spade, roundArg)))
		edges = append(edges, [2]string{"seal", "track"})
	}
	for _, e := range edges {
		f.Edges = append(f.Edges, [2]string{taskVar(e[0]), taskVar(e[1])})
	}
	return f.render("round")
}

// stageEdges are the task dependencies between stages, as task names: from
// a stage's last task (S_commit for a sharded one) to the next stage's
// first (S_shards), through round0_seal for a stage that reads the setup
// round, and from the stages nothing follows to seal. round0 names the
// round-0 stages in node order.
func stageEdges(nodes []dagNode, round0 []string) [][2]string {
	sharded := map[string]bool{}
	for _, n := range nodes {
		sharded[n.Stage] = n.Sharded
	}
	first := func(n string) string {
		if sharded[n] {
			return n + "_shards"
		}
		return n
	}
	last := func(n string) string {
		if sharded[n] {
			return n + "_commit"
		}
		return n
	}
	var edges [][2]string
	downstream := map[string]bool{}
	for _, n := range nodes {
		after0 := false
		for _, a := range n.After {
			downstream[a] = true
			// A stage reading the setup round's tables waits for its
			// seal: spade stage at round N needs round N-1 sealed, and
			// round 0 is sealed by round0_seal.
			if slices.Contains(round0, a) {
				if !after0 {
					edges = append(edges, [2]string{"round0_seal", first(n.Stage)})
					after0 = true
				}
				continue
			}
			edges = append(edges, [2]string{last(a), first(n.Stage)})
		}
	}
	for _, s := range round0 {
		edges = append(edges, [2]string{s, "round0_seal"})
	}
	if len(round0) > 0 {
		edges = append(edges, [2]string{"round0_seal", "seal"})
	}
	for _, n := range nodes {
		if !n.Round0 && !downstream[n.Stage] {
			edges = append(edges, [2]string{last(n.Stage), "seal"})
		}
	}
	return edges
}

// dagStoreURL checks a store URL for the tasks of a DAG without opening
// the store, and returns it with a file:// directory made absolute:
// Airflow runs each task in a fresh temporary directory, so a relative
// path would name a different store per task. Only file:// and s3://
// stores are accepted (a mem:// store lives and dies with one process).
// Errors wrap storage.ErrBadURL (exit 2) and name the URL, redacted; a
// URL that does not parse is not quoted at all, only the reason.
func dagStoreURL(raw string) (string, error) {
	u, err := storage.ParseURL(raw)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "file":
		root, err := filestore.RootFromURL(u)
		if err != nil {
			return "", err
		}
		return "file://" + root, nil
	case "s3":
		if _, err := s3store.ParseURL(u); err != nil {
			return "", err
		}
		return raw, nil
	}
	return "", storage.BadURL(fmt.Errorf("store URL %q: an Airflow DAG needs a file:// or s3:// store that every task reaches", storage.Redact(raw)))
}

// airflowScheduledDAG renders the scheduled DAG file (--schedule): one
// task, round_next, running `spade round next` once per schedule
// interval. The lease `round next` takes keeps rounds of the run from
// overlapping with any other `round next` (another Airflow, cron, a
// person), and max_active_runs=1 keeps this DAG's own runs apart. The
// task skips on exit 4 (busy) besides BashOperator's 99, fails without
// retries on 2 and 3 (SpadeBashOperator), and is retried on other codes;
// a retry resumes the round where the failed try stopped.
func airflowScheduledDAG(o airflowOpts) string {
	f := newAirflowFile(o)
	f.SchedulePy = pyStr(o.Schedule)
	f.RoundNext = pyStr(fmt.Sprintf("%s round next --lease-ttl %s", shQuote(o.Spade), strconv.FormatFloat(o.LeaseTTL, 'g', -1, 64)))
	f.SkipCodes = [2]int{exitSkip, exitBusy}
	return f.render("scheduled")
}
