package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"

	"github.com/spade-pipeline/spade/internal/textcut"
)

// Meta describes a loaded environment class, read from its class attributes
// (the spade_env contract, docs/environment-contract.md).
type Meta struct {
	// Class is the Python class name (at most 200 bytes).
	Class string `json:"class"`
	// Kind is "tool_use" for spade_env.ToolUseEnv subclasses, else "game".
	Kind string `json:"kind"`
	// Name is the class's name attribute (at most 200 bytes; "" when
	// missing).
	Name string `json:"name"`
	// Skill is the class's skill attribute (at most 200 bytes; "" when
	// missing).
	Skill string `json:"skill"`
	// MaxTurns is the turn limit; 0 when missing or not an int.
	MaxTurns int `json:"max_turns"`
	// RewardRange is [low, high]; nil when missing or malformed. Non-finite
	// bounds are kept (as NaN/Inf) so a validator can reject them.
	RewardRange []float64 `json:"reward_range"`
	// Tools is the tool-use class's tools list as JSON (nil for games).
	Tools json.RawMessage `json:"tools,omitempty"`
	// HasReset and HasStep report whether the program itself defines reset
	// and step (rather than inheriting the base class's).
	HasReset bool `json:"has_reset"`
	// HasStep reports whether the program itself defines step.
	HasStep bool `json:"has_step"`
}

// wireMeta is Meta as the harness sends it.
type wireMeta struct {
	Class       string          `json:"class"`
	Kind        string          `json:"kind"`
	Name        string          `json:"name"`
	Skill       string          `json:"skill"`
	MaxTurns    *int            `json:"max_turns"`
	RewardRange []Reward        `json:"reward_range"`
	Tools       json.RawMessage `json:"tools"`
	HasReset    bool            `json:"has_reset"`
	HasStep     bool            `json:"has_step"`
}

// metaTextBytes bounds Meta.Class, Kind, Name and Skill. The harness cuts
// name and skill too, but it runs in the program's process.
const metaTextBytes = 200

func (m *wireMeta) clean() Meta {
	out := Meta{Class: textcut.Prefix(m.Class, metaTextBytes), Kind: textcut.Prefix(m.Kind, metaTextBytes),
		Name: textcut.Prefix(m.Name, metaTextBytes), Skill: textcut.Prefix(m.Skill, metaTextBytes),
		HasReset: m.HasReset, HasStep: m.HasStep}
	if m.MaxTurns != nil {
		out.MaxTurns = *m.MaxTurns
	}
	if len(m.RewardRange) == 2 {
		out.RewardRange = []float64{float64(m.RewardRange[0]), float64(m.RewardRange[1])}
	}
	if len(m.Tools) > 0 && string(m.Tools) != "null" {
		out.Tools = append(json.RawMessage(nil), m.Tools...)
	}
	return out
}

// Program is one loaded environment program in a process of its own (forked
// from its slot's zygote under bubblewrap). It runs one episode at a time: a
// fresh instance in that process, or with Config.ForkEpisodes a forked child
// of it.
// Methods are safe for concurrent use but serialise. Close it to free the
// sandbox slot.
type Program struct {
	sb   *Sandbox
	w    *worker
	slot int
	meta Meta

	mu      sync.Mutex
	episode *Episode
	closed  bool
	strays  bool
}

// Meta returns the environment's metadata.
func (p *Program) Meta() Meta { return p.meta }

// Alive reports whether the program can still serve calls: false once its
// process has ended (os._exit, a signal, RLIMIT_CPU) or its sandbox was
// killed (a timeout, an output or reply overrun, a garbled frame), also
// when that happened from outside between calls (the OOM killer, a kill
// by hand): the sandbox's exit, or a frame waiting on the reply pipe while
// no call is in flight (the zygote's report that the program process
// ended), counts as dead without a call having to fail first.
func (p *Program) Alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.w.isKilled() || p.w.progErr != nil {
		return false
	}
	select {
	case <-p.w.done:
		return false
	default:
	}
	// p.mu is held: no call of this program is waiting for a reply.
	return !p.w.replyWaiting()
}

// Reset starts an episode: in the program's process (or, with
// Config.ForkEpisodes, in a forked child of it) it seeds Python's global
// random from seed, builds a fresh instance and calls reset(seed=seed)
// (Gymnasium). The episode must be closed before the next
// Reset. Errors: *Error (KindException, KindContract, KindTimeout, ...);
// ErrEpisodeOpen; ErrClosed.
func (p *Program) Reset(ctx context.Context, seed int64) (*Episode, error) {
	return p.reset(ctx, seed, false)
}

// ResetFresh is Reset with an instance of the class of a new execution of
// the program's code in the same process (module-level code runs again;
// the loaded class and its module stay as they are for later episodes).
// The validator replays a seed this way: what a program draws once at
// module level (os.urandom, an unseeded random.Random(), the clock)
// differs between program processes but not between the episodes of one.
// Its call timeout is Config.LoadTimeout plus CallTimeout, and an
// in-process episode gets twice CPUSeconds. When the second execution
// raises an Exception (module-level code that cannot run twice in one
// process, such as an exclusive file creation), the harness falls back to
// the loaded class. Errors are Reset's.
func (p *Program) ResetFresh(ctx context.Context, seed int64) (*Episode, error) {
	return p.reset(ctx, seed, true)
}

func (p *Program) reset(ctx context.Context, seed int64, fresh bool) (*Episode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosedProgram
	}
	if p.episode != nil {
		return nil, ErrEpisodeOpen
	}
	req := map[string]any{"op": "reset", "seed": seed, "fork": p.sb.cfg.ForkEpisodes}
	timeout := p.sb.cfg.CallTimeout
	if fresh {
		req["fresh"] = true
		// The module runs again first, which a load may take LoadTimeout for.
		timeout += p.sb.cfg.LoadTimeout
	}
	r, err := p.w.call(ctx, "reset", req, timeout)
	if err != nil {
		return nil, err
	}
	if r.Op == "ended" {
		return nil, endedError("reset", r, p.w)
	}
	if !r.OK {
		herr := harnessError("reset", r)
		// The episode process exits after a failed reset; consume its status.
		if _, err := p.w.call(ctx, "reset", nil, p.sb.cfg.CallTimeout); err != nil {
			return nil, err
		}
		return nil, herr
	}
	if r.Obs == nil {
		p.w.kill(KindProtocol, "reset reply without observation")
		return nil, &Error{Kind: KindProtocol, Op: "reset", Detail: "reset reply without observation"}
	}
	e := &Episode{p: p, Seed: seed, Observation: *r.Obs, Info: append(json.RawMessage(nil), r.Info...)}
	p.episode = e
	return e, nil
}

// Close kills the program's sandbox (and every process in it) and frees its
// slot. It is idempotent and always returns nil; whether processes were
// left behind is reported by LeftProcesses instead.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.episode != nil {
		p.episode.over, p.episode.ended = true, true
		p.episode = nil
	}
	p.strays = p.sb.release(p.w, p.slot)
	return nil
}

// LeftProcesses reports, after Close, whether processes the program started
// were still running when it was closed (daemons, unreaped children; the
// sandbox killed them). The sandbox's init process finds them, so unlike
// Episode.StrayProcesses, which the harness code in the program's own
// process reports after each episode, a program cannot hide them. False
// before Close, and without bubblewrap (no init to ask).
func (p *Program) LeftProcesses() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.strays
}

// endedError describes an episode process that exited while a reply was
// expected: os._exit, a signal, RLIMIT_CPU.
func endedError(op string, r *reply, w *worker) error {
	return processEndedError(op, "episode process", r, w)
}

// processEndedError names why a process of the sandbox (who: "episode
// process", "program process") ended, from the wait status the harness
// reported.
func processEndedError(op, who string, r *reply, w *worker) error {
	out := w.out.head(outputInError)
	switch {
	case r.Signal != nil:
		kind, det := signalKind(signalOf(*r.Signal), out)
		return &Error{Kind: kind, Op: op, Detail: who + " " + det, Output: out}
	case r.Exit != nil:
		return &Error{Kind: KindExit, Op: op, Detail: fmt.Sprintf("%s exited with status %d", who, *r.Exit), Output: out}
	}
	return &Error{Kind: KindProtocol, Op: op, Detail: who + " ended without a status", Output: out}
}

// StepResult is the Gymnasium 5-tuple of one step.
type StepResult struct {
	// Observation is the text the agent sees next.
	Observation string
	// Reward is the step reward. It may be NaN or infinite: the sandbox
	// transports values faithfully and the validator rejects them.
	Reward float64
	// Terminated: the episode reached a natural end (win or loss).
	Terminated bool
	// Truncated: the episode was cut off (turn limit).
	Truncated bool
	// ForcedTruncation: the harness set Truncated because the environment
	// ran max_turns steps without ending the episode itself.
	ForcedTruncation bool
	// Info is the step's info dict as JSON (non-finite floats appear as the
	// strings "NaN", "Infinity", "-Infinity"; other non-JSON values as
	// their repr). A play is a win when the final Info has "success": true.
	Info json.RawMessage
}

// Episode is one episode of a Program, between Reset and Close.
type Episode struct {
	p *Program
	// Seed is the reset seed.
	Seed int64
	// Observation and Info are what reset returned.
	Observation string
	// Info is reset's info dict as JSON, encoded as StepResult.Info is.
	Info json.RawMessage
	// Turns counts successful steps.
	Turns int
	// StrayProcesses is set once the episode's process has ended if it left
	// other processes running (a daemon, an unreaped child); the harness
	// killed them. Known after Close, or after a step error that ended the
	// episode process. The harness code that checks runs in the program's
	// own process, which a hostile program can change: Program.LeftProcesses
	// is the check it cannot evade.
	StrayProcesses bool

	over  bool // terminated, truncated or failed: no more steps
	ended bool // the episode process is gone
}

// Over reports whether the episode can take no more steps.
func (e *Episode) Over() bool { return e.over }

// Step sends one action. The episode is over after a result with Terminated
// or Truncated, or after any error. Errors: *Error (KindException,
// KindContract, KindTimeout, KindExit, ...); ErrEpisodeOver; ErrClosed.
func (e *Episode) Step(ctx context.Context, action string) (StepResult, error) {
	p := e.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return StepResult{}, errClosedProgram
	}
	if e.over {
		return StepResult{}, ErrEpisodeOver
	}
	r, err := p.w.call(ctx, "step", stepRequest{Op: "step", Action: action}, p.sb.cfg.CallTimeout)
	if err != nil {
		e.over, e.ended = true, true
		return StepResult{}, err
	}
	if r.Op == "ended" {
		e.over, e.ended = true, true
		e.StrayProcesses = r.Strays
		return StepResult{}, endedError("step", r, p.w)
	}
	if !r.OK {
		e.over = true
		return StepResult{}, harnessError("step", r)
	}
	if r.Obs == nil {
		e.over, e.ended = true, true
		p.w.kill(KindProtocol, "step reply without observation")
		return StepResult{}, &Error{Kind: KindProtocol, Op: "step", Detail: "step reply without observation"}
	}
	e.Turns++
	res := StepResult{
		Observation:      *r.Obs,
		Reward:           float64(r.Reward),
		Terminated:       r.Terminated,
		Truncated:        r.Truncated,
		ForcedTruncation: r.Forced,
		Info:             append(json.RawMessage(nil), r.Info...),
	}
	if res.Terminated || res.Truncated {
		e.over = true
	}
	return res, nil
}

type stepRequest struct {
	Op     string `json:"op"`
	Action string `json:"action"`
}

// ToolStatus is what a tool-use episode reports about its instructions and
// tools, for the validator's reset gate and impossibility screening
// (docs/method.md step 4).
type ToolStatus struct {
	// Instructions are the instruction texts, in reveal order.
	Instructions []string `json:"instructions"`
	// Criteria[i] is whether instruction i's criterion holds on the current
	// state (evaluated on a copy; an exception counts as false).
	Criteria []bool `json:"criteria"`
	// CriterionErrors[i] is the exception criterion i raised, or "".
	CriterionErrors []string `json:"criterion_errors"`
	// MissingKeys[i] are state keys criterion i read that the state lacks
	// (dotted paths for nested dicts).
	MissingKeys [][]string `json:"missing_keys"`
	// Tools are the declared tool names.
	Tools []string `json:"tools"`
	// Problems are static defects: tools without a tool_<name> method,
	// schemas the method cannot accept, empty texts, ...
	Problems []string `json:"problems"`
	// Solution is the environment's reference action list, nil if it
	// declares none.
	Solution []string `json:"solution"`
}

// ToolStatus asks a tool-use episode for its ToolStatus; usually called
// right after Reset. Errors: *Error (KindContract for a game environment,
// or for a reply whose per-instruction lists differ in length).
func (e *Episode) ToolStatus(ctx context.Context) (ToolStatus, error) {
	p := e.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ToolStatus{}, errClosedProgram
	}
	if e.ended {
		return ToolStatus{}, ErrEpisodeOver
	}
	r, err := p.w.call(ctx, "tool_status", map[string]string{"op": "tool_status"}, p.sb.cfg.CallTimeout)
	if err != nil {
		e.over, e.ended = true, true
		return ToolStatus{}, err
	}
	if r.Op == "ended" {
		e.over, e.ended = true, true
		return ToolStatus{}, endedError("tool_status", r, p.w)
	}
	if !r.OK {
		return ToolStatus{}, harnessError("tool_status", r)
	}
	st := r.ToolStatus
	if n := len(st.Instructions); len(st.Criteria) != n || len(st.CriterionErrors) != n || len(st.MissingKeys) != n {
		// The harness lists one entry per instruction in each; the reply
		// comes from the program's process, and callers index one list by
		// another's positions.
		return ToolStatus{}, &Error{Kind: KindContract, Op: "tool_status", Detail: fmt.Sprintf(
			"tool status lists %d instructions but %d criteria, %d criterion errors and %d missing-key lists",
			n, len(st.Criteria), len(st.CriterionErrors), len(st.MissingKeys))}
	}
	return st, nil
}

// Close ends the episode's process and frees the program for the next
// Reset. Errors: *Error when the episode has not ended within
// Config.CallTimeout of the close request, replies included (the
// program's sandbox is then killed).
func (e *Episode) Close() error {
	p := e.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.episode != e {
		return nil
	}
	p.episode = nil
	e.over = true
	if e.ended || p.closed {
		return nil
	}
	e.ended = true
	// One deadline for the whole close: a program that answers "close"
	// with frames other than "ended", forever, must not hold the caller.
	ctx, cancel := context.WithTimeout(context.Background(), p.sb.cfg.CallTimeout)
	defer cancel()
	r, err := p.w.call(ctx, "close", map[string]string{"op": "close"}, p.sb.cfg.CallTimeout)
	for err == nil && r.Op != "ended" {
		// A reply the episode sent after the caller stopped listening
		// (impossible for a well-behaved harness): skip it.
		r, err = p.w.call(ctx, "close", nil, p.sb.cfg.CallTimeout)
	}
	if err != nil {
		return err
	}
	e.StrayProcesses = r.Strays
	return nil
}

// Finite reports whether the reward is a finite number.
func (r StepResult) Finite() bool { return !math.IsNaN(r.Reward) && !math.IsInf(r.Reward, 0) }
