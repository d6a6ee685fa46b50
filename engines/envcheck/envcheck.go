// Package envcheck validates LLM-written SPADE environments (docs/method.md step
// 4: parse, reset, probe-step smoke test, consistent 5-tuple, graceful
// handling of malformed actions, reward within range; for tool use the reset
// gate and impossibility screening) and adds checks of its own: finite
// rewards (the public code lets NaN through), bounded text observations,
// determinism under a fixed seed, and termination within the turn limit.
//
// Every check runs the program in a sandbox.Sandbox; a hostile program fails
// a named check and costs only its own sandbox.
package envcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode"

	"github.com/spade-pipeline/spade/engines/action"
	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/internal/textcut"
)

// Check names, in report order. They are stable identifiers: the validations
// table stores them and designer prompts may quote them.
const (
	CheckCompile       = "compile"       // source compiles and its module executes
	CheckClass         = "class"         // exactly one environment class
	CheckMetadata      = "metadata"      // max_turns, reward_range, reset/step defined
	CheckReset         = "reset"         // reset(seed) works on every tested seed
	CheckStepTuple     = "step_tuple"    // step returns (str, float, bool, bool, dict)
	CheckProbeStep     = "probe_step"    // malformed and plausible actions never raise
	CheckReward        = "reward"        // rewards finite and within reward_range
	CheckObservation   = "observation"   // observations are bounded text
	CheckEpisodeEnds   = "episode_ends"  // the probe episode ends within max_turns
	CheckCleanup       = "cleanup"       // an episode leaves no process running
	CheckDeterministic = "deterministic" // same seed and actions, same trace
	CheckResetGate     = "reset_gate"    // tool use: no criterion holds after reset
	CheckImpossibility = "impossibility" // tool use: task refers to real tools/state, 3-5 instructions, reachable
	CheckActionsLine   = "actions_line"  // games under Options.ActionsLine: every observation to act on lists its valid actions
)

// ReasonTimeout is Report.Reason when Options.Timeout ran out before the
// validation could judge the program: a check was cut short by the
// validation's own time limit (not by the sandbox's per-call timeout,
// which is the program's failure and keeps the name of its check).
// Report.Stopped names the check that was running. It is not a check
// name.
const ReasonTimeout = "timeout"

// DefaultTimeout is the default of Options.Timeout.
const DefaultTimeout = 60 * time.Second

var gameChecks = []string{CheckCompile, CheckClass, CheckMetadata, CheckReset, CheckStepTuple, CheckProbeStep,
	CheckReward, CheckObservation, CheckEpisodeEnds, CheckCleanup, CheckDeterministic}

var quickChecks = []string{CheckCompile, CheckClass, CheckMetadata, CheckReset, CheckStepTuple, CheckProbeStep,
	CheckReward, CheckObservation, CheckCleanup}

// DefaultMaxObservationBytes is the contract's bound on one observation
// (docs/environment-contract.md) and the default of
// Options.MaxObservationBytes. The rollout stage applies it to every play.
const DefaultMaxObservationBytes = 16 << 10

// Options tunes a validation. Zero fields take the documented defaults.
type Options struct {
	// Seeds are the reset seeds tested (at least 3 are used; fewer are
	// padded with 0, 1, 2, ...). Default [0, 1, 2].
	Seeds []int64
	// Class names the environment class when the program defines several.
	Class string
	// MaxObservationBytes bounds one observation, in bytes. Default 16 KiB.
	MaxObservationBytes int
	// MaxTurnsLimit is the largest max_turns accepted (the probe plays up to
	// that many steps per episode). Default 100.
	MaxTurnsLimit int
	// Timeout bounds the whole validation, wall clock (default
	// DefaultTimeout, 60 s). When it runs out, the report's Reason is
	// ReasonTimeout and Stopped names the check it cut short.
	Timeout time.Duration
	// ActionsLine adds the check CheckActionsLine for games (not tool
	// use): the reset observation and every observation of an episode
	// still running must hold a "Valid actions: a | b" line with at least
	// one action (action.ValidActions). The validate stage sets it under
	// rollout.action_format valid_actions, where the agent's action is
	// matched against that line. QuickCheck ignores it.
	ActionsLine bool
}

func (o Options) withDefaults() Options {
	if o.MaxObservationBytes <= 0 {
		o.MaxObservationBytes = DefaultMaxObservationBytes
	}
	if o.MaxTurnsLimit <= 0 {
		o.MaxTurnsLimit = 100
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	seeds := append([]int64(nil), o.Seeds...)
	for i := int64(0); len(seeds) < 3; i++ {
		dup := false
		for _, s := range seeds {
			dup = dup || s == i
		}
		if !dup {
			seeds = append(seeds, i)
		}
	}
	o.Seeds = seeds
	return o
}

// Result is the outcome of one check.
type Result struct {
	// Name is one of the Check* constants.
	Name string `json:"name"`
	// Passed is true when the check ran and held.
	Passed bool `json:"passed"`
	// Skipped is true when an earlier failure stopped the validation before
	// this check could run (Passed is then false).
	Skipped bool `json:"skipped,omitempty"`
	// Detail explains a failure (seed, action, error kind) or summarises a
	// pass.
	Detail string `json:"detail"`
	// ErrorKind is the sandbox failure kind behind a failure, if any
	// (timeout, memory, exception, ...).
	ErrorKind string `json:"error_kind,omitempty"`
	// Duration is the wall-clock time of the phase this check owns; checks
	// judged during another check's phase report 0.
	Duration time.Duration `json:"duration_ns"`
	// TracebackTail is the end of the Python traceback, when there is one.
	TracebackTail string `json:"traceback_tail,omitempty"`
}

// Report is the outcome of one validation.
type Report struct {
	// Valid is true when every check passed.
	Valid bool `json:"valid"`
	// Reason is the name of the first check that failed ("" when valid),
	// or ReasonTimeout when Options.Timeout ran out first.
	Reason string `json:"reason,omitempty"`
	// Stopped is the check that was running when Options.Timeout ran out
	// (with Reason ReasonTimeout); "" otherwise. That check's result is
	// neither passed nor skipped, and says so in its detail.
	Stopped string `json:"stopped,omitempty"`
	// Kind is "game" or "tool_use" ("" when the class was not found).
	Kind string `json:"kind,omitempty"`
	// Meta is the environment's metadata (name, skill, reward_range,
	// max_turns, tools), when the program loaded.
	Meta *sandbox.Meta `json:"meta,omitempty"`
	// Checks are the results, in the fixed order of the Check* constants.
	Checks []Result `json:"checks"`
	// Duration is the wall-clock time of the whole validation.
	Duration time.Duration `json:"duration_ns"`
}

// Check runs the full validation of source. It never returns an error: every
// failure, including a sandbox that cannot start, is a failed check in the
// report (the reason names it).
func Check(ctx context.Context, sb *sandbox.Sandbox, source string, opts Options) Report {
	return run(ctx, sb, source, opts.withDefaults(), false)
}

// QuickCheck is the cheap validation the design stage uses between
// generation retries: compile, class, metadata, reset on the first seed, and
// one malformed plus one plausible probe step.
func QuickCheck(ctx context.Context, sb *sandbox.Sandbox, source string, opts Options) Report {
	return run(ctx, sb, source, opts.withDefaults(), true)
}

// checker accumulates results in report order.
type checker struct {
	order   []string
	results map[string]*Result
	failed  string
	// expired reports whether a failure's err is the validation's own
	// time limit running out (nil: never); limit is that limit.
	expired  func(err error) bool
	limit    time.Duration
	timedOut bool // the first failure was the time limit running out
}

func newChecker(names []string) *checker {
	c := &checker{order: names, results: make(map[string]*Result, len(names))}
	for _, n := range names {
		c.results[n] = &Result{Name: n}
	}
	return c
}

func (c *checker) ok() bool { return c.failed == "" }

// fail records a failure of check name. Validation stops at the first
// failure, so only the first one is kept.
func (c *checker) fail(name, detail string, err error) {
	r := c.results[name]
	if r == nil || c.failed != "" {
		return
	}
	r.Passed = false
	if c.expired != nil && c.expired(err) {
		// Not the program's failure: nothing is known of this check.
		r.Detail = fmt.Sprintf("not completed: the validation ran past its time limit of %s during this check", c.limit)
		c.failed, c.timedOut = name, true
		return
	}
	r.Detail = detail
	var se *sandbox.Error
	if errors.As(err, &se) {
		r.ErrorKind = string(se.Kind)
		r.TracebackTail = textcut.Suffix(se.Traceback, 2000)
		if r.TracebackTail == "" && se.Output != "" {
			r.TracebackTail = textcut.Suffix(se.Output, 2000)
		}
	}
	c.failed = name
}

func (c *checker) pass(name, detail string) {
	r := c.results[name]
	if r == nil || c.failed == name {
		return
	}
	r.Passed = true
	if r.Detail == "" {
		r.Detail = detail
	}
}

func (c *checker) time(name string, d time.Duration) { c.results[name].Duration += d }

func (c *checker) report(meta *sandbox.Meta, start time.Time) Report {
	rep := Report{Valid: c.failed == "", Reason: c.failed, Meta: meta, Duration: time.Since(start)}
	skipped := "not completed: check " + c.failed + " failed first"
	if c.timedOut {
		rep.Reason, rep.Stopped = ReasonTimeout, c.failed
		skipped = fmt.Sprintf("not completed: the time limit of %s ran out during check %s", c.limit, c.failed)
	}
	if meta != nil {
		rep.Kind = meta.Kind
	}
	for _, n := range c.order {
		r := *c.results[n]
		if !r.Passed && r.Detail == "" {
			r.Skipped = true
			r.Detail = skipped
		}
		rep.Checks = append(rep.Checks, r)
	}
	return rep
}

// errDetail is a one-line description of a sandbox failure.
func errDetail(err error) string {
	var se *sandbox.Error
	if errors.As(err, &se) {
		d := string(se.Kind)
		if se.Detail != "" {
			d += ": " + se.Detail
		}
		return d
	}
	return err.Error()
}

func run(ctx context.Context, sb *sandbox.Sandbox, source string, o Options, quick bool) Report {
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	names := gameChecks
	if quick {
		names = quickChecks
	}
	c := newChecker(names)
	c.limit = o.Timeout
	// A sandbox call cut short by this validation's deadline (the caller's
	// ctx still live) fails as canceled: the time limit ran out, which
	// says nothing of the program. A call that hit the sandbox's own call
	// timeout fails as KindTimeout and stays the program's failure.
	//
	// The deadline is read from the clock, not only from ctx.Err(): a
	// sandbox call that waits until ctx's deadline can return before the
	// context's own timer has fired and set ctx.Err() (seen on a loaded
	// machine), and that failure is the time limit's all the same.
	deadline, _ := ctx.Deadline()
	c.expired = func(err error) bool {
		ran := errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline)
		return err != nil && parent.Err() == nil && ran &&
			(sandbox.KindOf(err) == sandbox.KindCanceled || errors.Is(err, context.DeadlineExceeded))
	}

	t0 := time.Now()
	prog, err := sb.LoadClass(ctx, source, o.Class)
	c.time(CheckCompile, time.Since(t0))
	if err != nil {
		switch sandbox.KindOf(err) {
		case sandbox.KindNoClass:
			c.pass(CheckCompile, "compiled and executed")
			c.fail(CheckClass, errDetail(err), err)
		default:
			c.fail(CheckCompile, "load: "+errDetail(err), err)
		}
		return c.report(nil, start)
	}
	closed := false
	defer func() {
		if !closed {
			prog.Close()
		}
	}()
	meta := prog.Meta()
	// finish closes the program and judges what it left running: the
	// sandbox's init finds processes the per-episode check (harness code in
	// the program's own process, which the program can change) missed.
	finish := func() Report {
		closed = true
		prog.Close()
		if c.ok() && prog.LeftProcesses() {
			c.fail(CheckCleanup, "processes the program started were still running when it was closed (a daemon, or a child hidden from the per-episode check); they were killed", nil)
		}
		return c.report(&meta, start)
	}
	c.pass(CheckCompile, "compiled and executed")
	c.pass(CheckClass, "environment class "+meta.Class+" ("+meta.Kind+")")
	if meta.Kind == "tool_use" && !quick {
		c.order = append(append([]string(nil), c.order...), CheckResetGate, CheckImpossibility)
		c.results[CheckResetGate] = &Result{Name: CheckResetGate}
		c.results[CheckImpossibility] = &Result{Name: CheckImpossibility}
	}
	actionsLine := o.ActionsLine && meta.Kind != "tool_use" && !quick
	if actionsLine {
		c.order = append(append([]string(nil), c.order...), CheckActionsLine)
		c.results[CheckActionsLine] = &Result{Name: CheckActionsLine}
	}
	if d := metadataProblem(meta, o); d != "" {
		c.fail(CheckMetadata, d, nil)
		return c.report(&meta, start)
	}
	c.pass(CheckMetadata, fmt.Sprintf("max_turns %d, reward_range [%g, %g]", meta.MaxTurns, meta.RewardRange[0], meta.RewardRange[1]))

	v := &validator{c: c, prog: prog, meta: meta, o: o, actionsLine: actionsLine}
	seeds := o.Seeds
	if quick {
		seeds = seeds[:1]
	}
	traces := make([][]string, len(seeds))
	for i, seed := range seeds {
		maxSteps := meta.MaxTurns
		if quick {
			maxSteps = 2
		}
		tr, ok := v.episode(ctx, seed, maxSteps, !quick, true, false)
		if !ok {
			return c.report(&meta, start)
		}
		traces[i] = tr
	}
	c.pass(CheckReset, fmt.Sprintf("reset ok on seeds %v", seeds))
	c.pass(CheckStepTuple, "5-tuples well formed")
	c.pass(CheckProbeStep, "malformed and plausible actions handled")
	c.pass(CheckReward, "rewards finite and within reward_range")
	c.pass(CheckObservation, fmt.Sprintf("observations are text of at most %d bytes", o.MaxObservationBytes))
	c.pass(CheckCleanup, "no episode left a process running")
	if quick {
		return finish()
	}
	if actionsLine {
		c.pass(CheckActionsLine, `every observation to act on lists its valid actions ("Valid actions: a | b")`)
	}
	c.pass(CheckEpisodeEnds, v.endsDetail())

	if !v.replayAll(ctx, seeds, traces) {
		return c.report(&meta, start)
	}

	if meta.Kind == "tool_use" {
		v.toolChecks(ctx, seeds)
	}
	return finish()
}

// replayAll is run's determinism check: each of seeds is played again
// and must repeat traces, its first play's; false when it failed (the
// check's result is recorded). Split out of run to keep it short.
func (v *validator) replayAll(ctx context.Context, seeds []int64, traces [][]string) bool {
	// Every seed is replayed after the other episodes (state kept on the
	// class or in module globals shows), the last one on the class of a
	// second execution of the program's code (ResetFresh): what the program
	// draws once at module level (os.urandom, random.Random(), the clock)
	// is the same for every episode of one process but differs between
	// processes, so between this validation and the rollouts.
	t0 := time.Now()
	for i, seed := range seeds {
		fresh := i == len(seeds)-1
		tr, ok := v.episode(ctx, seed, v.meta.MaxTurns, true, false, fresh)
		if !ok {
			if v.c.ok() {
				v.c.fail(CheckDeterministic, fmt.Sprintf("seed %d: the replay failed", seed), nil)
			}
			return false
		}
		if d := firstDiff(traces[i], tr); d != "" {
			how := ""
			if fresh {
				how = " on the class of a second execution of the program's code (module-level state was new: randomness or a clock reading taken at module level, or state left by earlier episodes)"
			}
			v.c.fail(CheckDeterministic, fmt.Sprintf("seed %d replayed with the same actions%s diverged at %s", seed, how, d), nil)
			return false
		}
	}
	v.c.time(CheckDeterministic, time.Since(t0))
	v.c.pass(CheckDeterministic, fmt.Sprintf("%d seeds replayed identically", len(seeds)))
	return true
}

// metadataProblem checks the class attributes before anything runs.
func metadataProblem(m sandbox.Meta, o Options) string {
	switch {
	case m.Kind != "game" && m.Kind != "tool_use":
		// The harness derives it; a program that rewrote the harness in its
		// own process could report anything.
		return fmt.Sprintf("kind must be game or tool_use, got %q", m.Kind)
	case m.Kind == "game" && len(m.Tools) > 0:
		// The harness sends tools only for ToolUseEnv subclasses; a game
		// with tools would skip the tool-use checks here and still be played
		// with tool calls (the rollout stage goes by the tools column).
		return "a game declares no tools (tools are for spade_env.ToolUseEnv subclasses)"
	case m.Kind == "game" && !m.HasStep:
		return "class " + m.Class + " defines no step method"
	case m.Kind == "game" && !m.HasReset:
		return "class " + m.Class + " defines no reset method"
	case m.MaxTurns < 1 || m.MaxTurns > o.MaxTurnsLimit:
		return fmt.Sprintf("max_turns must be an int in [1, %d], got %d", o.MaxTurnsLimit, m.MaxTurns)
	case len(m.RewardRange) != 2:
		return "reward_range must be a pair of numbers (low, high)"
	case !finite(m.RewardRange[0]) || !finite(m.RewardRange[1]) || m.RewardRange[0] >= m.RewardRange[1]:
		return fmt.Sprintf("reward_range must be finite with low < high, got [%g, %g]", m.RewardRange[0], m.RewardRange[1])
	case !finite(m.RewardRange[1] - m.RewardRange[0]):
		// The designer reward divides regret by the width; the label stage
		// takes an infinite width as 1, which would leave returns on a
		// scale up to 1e308 unnormalised (docs/regret.md).
		return fmt.Sprintf("reward_range must have a finite width high - low, got [%g, %g]", m.RewardRange[0], m.RewardRange[1])
	}
	return ""
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// RewardInRange reports whether reward r is finite and lies in [lo, hi],
// with a tolerance of 1e-9 of the range's width for rounding (a fixed 1e-9
// would admit rewards far outside a narrow range such as [0, 1e-12]). Each
// bound is scaled before subtracting so the tolerance of a range as wide as
// the float64 range stays finite. The rollout stage applies the same test
// to every play.
func RewardInRange(r, lo, hi float64) bool {
	tol := 1e-9*hi - 1e-9*lo
	return finite(r) && r >= lo-tol && r <= hi+tol
}

// isObject reports whether raw is a JSON object (not null, an array or a
// scalar): the info dict of the contract.
func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// firstDiff locates the first difference of two traces.
func firstDiff(a, b []string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("trace entry %d (%s vs %s)", i, clip(a[i], 80), clip(b[i], 80))
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("length (%d vs %d entries)", len(a), len(b))
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:n])
}

// validator plays probe episodes and judges each reply.
type validator struct {
	// actionsLine asks every observation to act on for a Valid actions
	// line (Options.ActionsLine, games only).
	actionsLine bool
	c           *checker
	prog        *sandbox.Program
	meta        sandbox.Meta
	o           Options

	forced, selfEnded, turnsMax int
}

func (v *validator) endsDetail() string {
	d := fmt.Sprintf("probe episodes ended within max_turns %d (longest %d steps)", v.meta.MaxTurns, v.turnsMax)
	if v.forced > 0 {
		d += fmt.Sprintf("; %d truncated by the harness at max_turns", v.forced)
	}
	return d
}

// malformedActions are what a confused agent sends; the contract says they
// get feedback text, never an exception.
func (v *validator) malformedActions() []string {
	ms := []string{"", "???", "\x00\x01garbage\u2603", strings.Repeat("x", 5000)}
	if v.meta.Kind == "tool_use" {
		ms = append(ms, `{"name": "no_such_tool", "arguments": {}}`, `{"name": 5}`, `[1, 2`)
		if names := toolNames(v.meta.Tools); len(names) > 0 {
			ms = append(ms, fmt.Sprintf(`{"name": %q, "arguments": "not an object"}`, names[0]),
				fmt.Sprintf(`{"name": %q, "arguments": {"zz_unknown": 1}}`, names[0]))
		}
	}
	return ms
}

// episode plays one probe episode on seed and returns its trace. When full,
// malformed actions are interleaved and play continues to the end (at most
// maxSteps steps); otherwise one malformed and one plausible step are taken.
// The probe policy is a pure function of seed and observations, so a replay
// of a deterministic environment takes the same actions. first marks the
// first pass over the seeds, fresh a replay with Program.ResetFresh.
func (v *validator) episode(ctx context.Context, seed int64, maxSteps int, full, first, fresh bool) ([]string, bool) {
	c := v.c
	t0 := time.Now()
	reset := v.prog.Reset
	if fresh {
		reset = v.prog.ResetFresh
	}
	ep, err := reset(ctx, seed)
	if first {
		c.time(CheckReset, time.Since(t0))
	}
	if err != nil {
		v.resetFailed(seed, err, first, fresh)
		return nil, false
	}
	closed := false
	defer func() {
		if !closed {
			ep.Close()
		}
	}()
	// finish closes the episode and judges what it left behind.
	finish := func(trace []string) ([]string, bool) {
		closed = true
		if err := ep.Close(); err != nil {
			c.fail(CheckCleanup, fmt.Sprintf("seed %d: closing the episode: %s", seed, errDetail(err)), err)
			return nil, false
		}
		if ep.StrayProcesses {
			c.fail(CheckCleanup, fmt.Sprintf("seed %d: the episode left processes running after it ended (daemon or unreaped child); they were killed", seed), nil)
			return nil, false
		}
		return trace, true
	}
	if !isObject(ep.Info) {
		// The harness refuses a reset info that is not a dict, but it runs
		// in the program's process: judge what arrived.
		name := CheckReset
		if !first {
			name = CheckDeterministic
		}
		c.fail(name, fmt.Sprintf("reset(seed=%d): info %s is not a JSON object (a dict)", seed, clip(string(ep.Info), 40)), nil)
		return nil, false
	}
	if !v.observation(ep.Observation, fmt.Sprintf("reset(seed=%d)", seed)) || !v.actionsListed(ep.Observation, fmt.Sprintf("reset(seed=%d)", seed)) {
		return nil, false
	}
	trace := []string{ep.Observation, string(ep.Info)}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	malformed := v.malformedActions()
	obs := ep.Observation
	t1 := time.Now()
	defer func() {
		if first {
			c.time(CheckProbeStep, time.Since(t1))
		}
	}()
	// At most maxSteps steps: the episode must have ended by then (the
	// harness's forced truncation at max_turns is code in the program's
	// process, which the program can switch off).
	for step := 0; step < maxSteps; step++ {
		var action string
		isMalformed := false
		switch {
		case !full && step == 0, full && step < len(malformed) && step%2 == 0:
			action, isMalformed = malformed[(step/2)%len(malformed)], true
		default:
			action = v.plausible(obs, rng)
		}
		res, err := ep.Step(ctx, action)
		where := fmt.Sprintf("seed %d, step %d, action %s", seed, step+1, clip(action, 60))
		if !v.judgeStep(where, res, err, first, isMalformed) {
			return nil, false
		}
		trace = append(trace, action, res.Observation, fmt.Sprint(res.Reward, res.Terminated, res.Truncated), string(res.Info))
		obs = res.Observation
		if res.Terminated || res.Truncated {
			if res.ForcedTruncation {
				v.forced++
			} else {
				v.selfEnded++
			}
			v.turnsMax = max(v.turnsMax, step+1)
			return finish(trace)
		}
		if !full && step >= 1 {
			return finish(trace)
		}
	}
	if full && c.ok() {
		c.fail(CheckEpisodeEnds, fmt.Sprintf("seed %d: episode did not end within max_turns %d", seed, v.meta.MaxTurns), nil)
		return nil, false
	}
	return finish(trace)
}

// resetFailed records the failure of episode's reset on seed (err): a
// replay's (first false; fresh: with Program.ResetFresh) fails
// CheckDeterministic, a first play's CheckReset. Split out of episode.
func (v *validator) resetFailed(seed int64, err error, first, fresh bool) {
	c := v.c
	if fresh {
		c.fail(CheckDeterministic, fmt.Sprintf("seed %d: reset failed on replay with a second execution of the program's code: %s", seed, errDetail(err)), err)
		return
	}
	if !first {
		c.fail(CheckDeterministic, fmt.Sprintf("seed %d: reset failed on replay: %s", seed, errDetail(err)), err)
		return
	}
	name := CheckReset
	c.fail(name, fmt.Sprintf("reset(seed=%d): %s", seed, errDetail(err)), err)
}

// judgeStep checks one step of episode (where names it; res and err are
// what Step returned; isMalformed: a malformed probe action); false after
// recording a failure. Split out of episode.
func (v *validator) judgeStep(where string, res sandbox.StepResult, err error, first, isMalformed bool) bool {
	if err != nil {
		switch {
		case sandbox.KindOf(err) == sandbox.KindContract:
			v.c.fail(CheckStepTuple, where+": "+errDetail(err), err)
		case !first:
			v.c.fail(CheckDeterministic, where+": replay failed: "+errDetail(err), err)
		default:
			what := "plausible"
			if isMalformed {
				what = "malformed"
			}
			v.c.fail(CheckProbeStep, where+" ("+what+"): "+errDetail(err), err)
		}
		return false
	}
	if d := successProblem(res.Info); d != "" {
		v.c.fail(CheckStepTuple, where+": "+d, nil)
		return false
	}
	if !finite(res.Reward) {
		v.c.fail(CheckReward, fmt.Sprintf("%s: reward %v is not finite", where, res.Reward), nil)
		return false
	}
	if lo, hi := v.meta.RewardRange[0], v.meta.RewardRange[1]; !RewardInRange(res.Reward, lo, hi) {
		v.c.fail(CheckReward, fmt.Sprintf("%s: reward %g outside reward_range [%g, %g]", where, res.Reward, lo, hi), nil)
		return false
	}
	if !v.observation(res.Observation, where) {
		return false
	}
	if !res.Terminated && !res.Truncated && !v.actionsListed(res.Observation, where) {
		return false
	}
	return true
}

// observation checks one observation; false after recording a failure.
func (v *validator) observation(obs, where string) bool {
	if len(obs) > v.o.MaxObservationBytes {
		v.c.fail(CheckObservation, fmt.Sprintf("%s: observation of %d bytes exceeds %d", where, len(obs), v.o.MaxObservationBytes), nil)
		return false
	}
	if strings.TrimSpace(obs) == "" {
		v.c.fail(CheckObservation, where+": observation is empty", nil)
		return false
	}
	// Zero-width spaces, NULs and other format or control characters are
	// not text an agent can read.
	if strings.IndexFunc(obs, func(r rune) bool { return unicode.IsGraphic(r) && !unicode.IsSpace(r) }) < 0 {
		v.c.fail(CheckObservation, where+": observation has no visible character (only spaces, control or format characters such as U+200B)", nil)
		return false
	}
	return true
}

// actionsListed checks, under actionsLine, that an observation the agent
// must act on lists its valid actions; false after recording a failure.
func (v *validator) actionsListed(obs, where string) bool {
	if !v.actionsLine {
		return true
	}
	if _, ok := action.ValidActions(obs); !ok {
		v.c.fail(CheckActionsLine, where+`: observation has no "Valid actions: a | b | c" line (rollout.action_format valid_actions matches the agent's reply against it): `+clip(obs, 80), nil)
		return false
	}
	return true
}

// successProblem checks that info is a JSON object (JSON null is not: the
// harness that would refuse it runs in the program's process) and that the
// optional info["success"], the win signal, is a bool when present.
func successProblem(info json.RawMessage) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(info, &m); err != nil || m == nil {
		return fmt.Sprintf("info %s is not a JSON object (a dict)", clip(string(info), 40))
	}
	if s, ok := m["success"]; ok && string(s) != "true" && string(s) != "false" {
		return fmt.Sprintf(`info["success"] must be a bool, got %s`, clip(string(s), 40))
	}
	return ""
}
