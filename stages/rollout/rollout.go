// Package rollout is the rollout stage (docs/method.md step 6): every environment
// of the round is played G times without its hint and, on regeneration
// rounds, G times with it. The agent sees observations (and the hint), never
// the source; the environment runs in the sandbox. Every play is a row of
// rollouts, every agent call a row of rollout_calls.
package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/engines/action"
	"github.com/spade-pipeline/spade/engines/draw"
	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/procedural"
	"github.com/spade-pipeline/spade/engines/prompt"
	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// Stage is the rollout stage; it runs every round.
type Stage struct {
	// Eng holds the shared sandbox and model backend (required).
	Eng *engine.Engines

	// The targets of the round whose parts run now, read once for all its
	// parts (the runner runs many parts at once, and each would otherwise
	// hold its own copy of the environments' sources).
	mu         sync.Mutex
	targetsKey string
	targets    []Target
}

// Name implements pipeline.Stage.
func (*Stage) Name() string { return "rollout" }

// Outputs implements pipeline.Stage.
func (*Stage) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "rollouts"}, {Table: engine.CallsTable("rollout"), Kind: "llm_calls"}}
}

// Plan implements pipeline.Stage. The previous round's checkpoints table is
// an input so that each round records the model it played with.
func (*Stage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 {
		return nil, false
	}
	ins := []pipeline.Input{{Table: "checkpoints", Round: ri.Round - 1, Optional: ri.Round == 1}}
	if ri.Regeneration {
		return append(ins, pipeline.Input{Table: "environments", Round: ri.Round}, pipeline.Input{Table: "hints", Round: ri.Round}), true
	}
	return append(ins, pipeline.Input{Table: "pool", Round: ri.Round - 1}), true
}

// Serve implements pipeline.Serving: the round's policy behind the agent
// role's backend for this stage (engine.Engines.Serve).
func (s *Stage) Serve(ctx context.Context, env *pipeline.Env) (func(), error) {
	return s.Eng.Serve(ctx, env, "rollout")
}

// ConfigSubset implements pipeline.Stage.
// Under design.mode fixed_pool the round's draw from the pool
// (draw.PoolSize) is part of it; 0, and left out, otherwise.
func (*Stage) ConfigSubset(c *config.Config) any {
	return struct {
		Rollout config.Rollout
		Model   config.Model
		Sandbox config.Sandbox
		Draw    int `json:",omitempty"`
	}{c.Rollout, c.Model, c.Sandbox, draw.PoolSize(c.Design, c.Sample)}
}

// Target is one environment to play.
type Target struct {
	// EnvID, Skill, Source, Hint and Tools come from the environments and
	// hints tables (regeneration rounds) or the pool: the id, skill,
	// Python source, hint ("" when none) and tool declarations as JSON
	// ("" for games).
	EnvID, Skill, Source, Hint, Tools string
	// ToolUse plays the environment with tool calls (the tool-use agent
	// prompt, and Tools declared to the model): isToolUse(Tools), the
	// same rule for the environments table and the pool.
	ToolUse bool
	// MaxTurns is the environment's turn limit (0: none declared); a play
	// stops at the smaller of it and rollout.max_turns.
	MaxTurns int
	// RewardRange is the validated reward_range [low, high] of an
	// environments row; nil for a pool row, which does not carry it (the
	// loaded program's declared range is used then).
	RewardRange []float64
}

// isToolUse reports whether an environment whose environments or pool row
// has the given tools column is a tool-use environment. The authoritative
// kind is the env_kind validation records ("tool_use" for subclasses of
// spade_env.ToolUseEnv); the pool table does not carry it, but validation
// fills tools (non-empty JSON, "null" when the class sets tools = None)
// exactly when env_kind is "tool_use", so this one rule gives the same
// answer in regeneration rounds and pool rounds. The slot's setting is
// only what was asked for, not what the class is, and plays no part.
func isToolUse(tools string) bool { return tools != "" }

// envTarget is the target of a valid environments row on a regeneration
// round, with its hint ("" when none).
func envTarget(e schemas.Environment, hint string) Target {
	return Target{EnvID: e.EnvID, Skill: e.Skill, Source: e.Source, Hint: hint, Tools: e.Tools, ToolUse: isToolUse(e.Tools), MaxTurns: int(e.MaxTurns),
		RewardRange: []float64{e.RewardLow, e.RewardHigh}}
}

// poolTarget is the target of a pool row on a pool round.
func poolTarget(p schemas.PoolEnv) Target {
	return Target{EnvID: p.EnvID, Skill: p.Skill, Source: p.Source, Hint: p.Hint, Tools: p.Tools, ToolUse: isToolUse(p.Tools), MaxTurns: int(p.MaxTurns)}
}

// roundTargets returns targets(env), read once per round and inputs: the
// key is the run, the round, the config and the content digests of the
// input tables the targets come from. The slice is shared: callers only
// read it. Errors are targets'.
func (s *Stage) roundTargets(ctx context.Context, env *pipeline.Env) ([]Target, error) {
	r := env.Round.Round
	key := fmt.Sprintf("%s/%d/%p", env.Round.Run, r, env.Config)
	for _, m := range []*pipeline.Manifest{env.Manifest("environments", r), env.Manifest("hints", r), env.Manifest("pool", r-1)} {
		if m != nil {
			key += "/" + m.Table + "=" + m.ContentDigest()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.targetsKey == key {
		return s.targets, nil
	}
	t, err := targets(ctx, env)
	if err != nil {
		return nil, err
	}
	s.targetsKey, s.targets = key, t
	return t, nil
}

func targets(ctx context.Context, env *pipeline.Env) ([]Target, error) {
	ri := env.Round
	var out []Target
	if ri.Regeneration {
		envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", ri.Round)
		if err != nil {
			return nil, err
		}
		hints, err := pipeline.ReadAll(ctx, env, schemas.Hints, "hints", ri.Round)
		if err != nil {
			return nil, err
		}
		hint := map[string]string{}
		for _, h := range hints {
			hint[h.EnvID] = h.Hint
		}
		for _, e := range envs {
			if e.Valid {
				out = append(out, envTarget(e, hint[e.EnvID]))
			}
		}
		return out, nil
	}
	pool, err := pipeline.ReadAll(ctx, env, schemas.Pool, "pool", ri.Round-1)
	if err != nil {
		return nil, err
	}
	for _, p := range draw.Pool(pool, ri, draw.PoolSize(env.Config.Design, env.Config.Sample)) {
		out = append(out, poolTarget(p))
	}
	return out, nil
}

// Parts implements pipeline.Stage.Parts: one part per
// rollout.envs_per_part environments to play (at least one). It reads the
// targets' tables to count them, so its errors are those of reading
// environments and hints, or pool(r-1) (pipeline.ReadAll: the store's
// error, pipeline.ErrIntegrity, table.ErrCorrupt, a schema mismatch),
// returned unwrapped.
func (s *Stage) Parts(ctx context.Context, env *pipeline.Env) (int, error) {
	t, err := s.roundTargets(ctx, env)
	if err != nil {
		return 0, err
	}
	per := env.Config.Rollout.EnvsPerPart
	return max(1, (len(t)+per-1)/per), nil
}

// Run implements pipeline.Stage.Run: it plays the part's environments. A
// failed load, reset, step or agent call is recorded in that play's
// rollouts row (Rollout.Error), not returned. Errors returned: those of
// Parts (reading the targets); engine.Engines.ForStage's and
// Engines.Sandbox's ("sandbox: ..."); ctx.Err() when ctx is cancelled
// during the plays; and the StageModel's Emit error (replay.ErrMiss or
// model.ErrUnavailable, wrapped), which fails the part so nothing is
// committed.
//
// Every play of the part is its own task: the plays of all environments
// (and of the other parts this process runs at the same time) are in
// flight together, model.concurrency of them at once (Engines.Tasks), so
// the model server sees that many calls in flight, not one per CPU. A play
// in flight holds one sandbox slot (its program stays loaded between its
// turns) and no CPU while it waits for the model. Its resets and steps
// hold one of `workers` CPU places each (Engines.CPU) for at most
// cpuLease, so that the sandbox's wall-clock timeouts see an
// environment's own pace, as validation does, not the pace of
// model.concurrency programs stepping at once (what times out does not
// depend on model.concurrency), while a step that sleeps or hangs gives
// its place up after the lease instead of stalling the other plays until
// sandbox.call_timeout_s kills it. Program loads are not held to the CPU
// places: the plays in flight start together, so the model server sees
// their first calls together (docs/models.md "What runs at once").
func (s *Stage) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	all, err := s.roundTargets(ctx, env)
	if err != nil {
		return err
	}
	per := env.Config.Rollout.EnvsPerPart
	ts := all[min(len(all), part*per):min(len(all), (part+1)*per)]
	rec, err := s.Eng.ForStage(ctx, "rollout", env.Round.Round)
	if err != nil {
		return err
	}
	sb, err := s.Eng.Sandbox()
	if err != nil {
		return err
	}
	ps := plays(env, ts)
	rows := make([]schemas.Rollout, len(ps))
	tasks, cpu := s.Eng.Tasks(), s.Eng.CPU()
	lease := cpuLease(env.Config)
	wp := pool.New().WithContext(ctx)
	for i, p := range ps {
		wp.Go(func(ctx context.Context) error {
			key := engine.Key{Part: part, Seq: i}
			if err := tasks.Acquire(ctx, key); err != nil {
				return err
			}
			defer tasks.Release()
			rows[i] = playOne(ctx, env, rec, sb, gate{cpu, key, lease}, p)
			rows[i].CheckpointID = rec.CheckpointID
			return ctx.Err()
		})
	}
	if err := wp.Wait(); err != nil {
		return err
	}
	pipeline.Emit(out, schemas.Rollouts, "rollouts", rows...)
	return rec.Emit(ctx, out, env.Config)
}

// PartsInFlight implements pipeline.PartsInFlight: enough parts that their
// plays (up to 2 x rollout.group_size per environment) fill
// model.concurrency with a part to spare (engine.Engines.PartsInFlight).
func (s *Stage) PartsInFlight(c *config.Config) int {
	return s.Eng.PartsInFlight(c.Rollout.EnvsPerPart * 2 * c.Rollout.GroupSize)
}

// PlaySeed derives the reset seed of one play from (run seed, round, env,
// arm, sample): unique per play and reproducible.
func PlaySeed(runSeed int64, round int, envID string, hinted bool, sampleIdx int) int64 {
	return pipeline.DeriveSeed(runSeed, "play", round, envID, hinted, sampleIdx) & (1<<53 - 1)
}

// play is one play to make: an environment, an arm and a sample.
type play struct {
	t      Target
	hinted bool
	sample int
}

// plays lists every arm and sample of the environments ts, in the order
// they are handed places in flight: sample by sample, and within a sample
// arm by arm across all environments, so that every environment has plays
// in flight from the start and none waits behind another's group.
func plays(env *pipeline.Env, ts []Target) []play {
	var out []play
	for i := 0; i < env.Config.Rollout.GroupSize; i++ {
		for _, hinted := range []bool{false, true} {
			for _, t := range ts {
				// Without a hint (its call failed, or the answer was empty)
				// there is no hinted arm: played with an empty hint it would
				// be a second unhinted arm, and its regret noise around 0. The
				// label then has no regret and the designer reward of an
				// environment without hinted plays (-1, docs/regret.md).
				if hinted && !(env.Round.Regeneration && t.Hint != "") {
					continue
				}
				out = append(out, play{t: t, hinted: hinted, sample: i})
			}
		}
	}
	return out
}

// playOne makes one play in a program of its own: loaded for this play,
// closed after it. A play's row is thus a function of the environment's
// source, its seed and the agent's answers alone: no play sees what
// another left in the program's process (module or class state), whatever
// order and concurrency the plays run in.
func playOne(ctx context.Context, env *pipeline.Env, backend model.Backend, sb *sandbox.Sandbox, g gate, p play) schemas.Rollout {
	t := p.t
	r := schemas.Rollout{EnvID: t.EnvID, Hinted: p.hinted, Sample: int64(p.sample), Seed: PlaySeed(env.Round.Seed, env.Round.Round, t.EnvID, p.hinted, p.sample)}
	prog, err := sb.Load(ctx, t.Source)
	if err != nil {
		r.Error = "env load: " + err.Error()
		r.Termination = schemas.TerminationError
		return r
	}
	defer prog.Close()
	playEpisode(ctx, env.Config, backend, prog, g, t, p.hinted, &r)
	return r
}

// gate bounds a play's sandbox calls by the CPU places of l (nil: no
// bound), served in key order among the plays waiting for one; a call
// holds its place for lease at most.
type gate struct {
	l     *engine.Limiter
	key   engine.Key
	lease time.Duration
}

// maxCPULease bounds how long one sandbox call of a play holds its CPU
// place (cpuLease): environment steps take microseconds to milliseconds
// of CPU (docs/benchmarks.md section 7), so a call still running after
// this long is sleeping, hanging or exceptionally heavy, and goes on
// without a place while the other plays step.
const maxCPULease = 250 * time.Millisecond

// cpuLease is maxCPULease, or half of sandbox.call_timeout_s when that is
// shorter: a call that needs less CPU than its lease finishes before its
// timeout whatever model.concurrency, short of the CPU that program loads
// (not held to the places) take beside it while many plays start at once
// (docs/models.md "What runs at once").
func cpuLease(cfg *config.Config) time.Duration {
	return min(maxCPULease, time.Duration(cfg.Sandbox.CallTimeoutS*float64(time.Second)/2))
}

// run calls f holding one of g's places, given up after g.lease if f has
// not returned by then. Errors: f's, or ctx.Err() when ctx ends while
// waiting for a place (f is then not called).
func (g gate) run(ctx context.Context, f func() error) error {
	if g.l == nil {
		return f()
	}
	if err := g.l.Acquire(ctx, g.key); err != nil {
		return err
	}
	var once sync.Once
	release := func() { once.Do(g.l.Release) }
	if g.lease > 0 {
		t := time.AfterFunc(g.lease, release)
		defer t.Stop()
	}
	defer release()
	return f()
}

// rewardBounds is the reward_range a play's rewards must lie in: the
// target's validated one, else (pool rows) the loaded program's.
func rewardBounds(t Target, meta sandbox.Meta) (lo, hi float64, ok bool) {
	for _, rr := range [][]float64{t.RewardRange, meta.RewardRange} {
		if len(rr) == 2 && !math.IsNaN(rr[0]) && !math.IsInf(rr[0], 0) && !math.IsNaN(rr[1]) && !math.IsInf(rr[1], 0) && rr[0] < rr[1] {
			return rr[0], rr[1], true
		}
	}
	return 0, 0, false
}

// Play runs one episode: reset with r.Seed, then agent turn and step until
// the episode ends or the turn limit (the smaller of the environment's and
// rollout.max_turns) truncates it. Failures of the environment or the agent
// end the play and are recorded in r.Error; the return so far stands.
//
// Each turn the reply's reasoning (the server's reasoning_content, <think>
// blocks) is split from its answer (model.ReplyParts) and kept in the
// transcript, never sent back; a tool call is the action of a tool-use
// play; otherwise the action is extracted from the answer by
// rollout.action_format (engines/action), and a reply without one
// is stepped as it is and counted in r.Unextracted. A reply cut at
// rollout.max_tokens (finish_reason "length") is not stepped: it ends the
// play as an agent failure. r.Replies and r.FinishReasons record every
// answered call; r.Termination says how the play ended.
// What the validator checks on its probe episodes is checked again on
// every step here (a reward outside reward_range, an observation over
// envcheck.DefaultMaxObservationBytes): a program can tell the validator's
// seeds and pace from a play's and behave only under validation.
func Play(ctx context.Context, cfg *config.Config, backend model.Backend, prog *sandbox.Program, t Target, hinted bool, r *schemas.Rollout) {
	playEpisode(ctx, cfg, backend, prog, gate{}, t, hinted, r)
}

// playEpisode is Play with its reset and steps made through g.
func playEpisode(ctx context.Context, cfg *config.Config, backend model.Backend, prog *sandbox.Program, g gate, t Target, hinted bool, r *schemas.Rollout) {
	hint := ""
	if hinted {
		hint = t.Hint
	}
	r.Termination = schemas.TerminationError // until the play ends otherwise
	lo, hi, bounded := rewardBounds(t, prog.Meta())
	if !bounded {
		r.Error = "env reset: no finite reward_range with low < high"
		return
	}
	var ep *sandbox.Episode
	err := g.run(ctx, func() (err error) {
		ep, err = prog.Reset(ctx, r.Seed)
		return err
	})
	if err != nil {
		r.Error = "env reset: " + err.Error()
		return
	}
	defer ep.Close()
	if n := len(ep.Observation); n > envcheck.DefaultMaxObservationBytes {
		r.Error = fmt.Sprintf("env reset: observation of %d bytes exceeds %d", n, envcheck.DefaultMaxObservationBytes)
		return
	}
	msgs := []model.Message{
		{Role: model.RoleSystem, Content: prompt.AgentSystem(hint, t.ToolUse, cfg.Rollout.ActionFormat)},
		{Role: model.RoleUser, Content: ep.Observation},
	}
	tools := declaredTools(t)
	limit := cfg.Rollout.MaxTurns
	if t.MaxTurns > 0 {
		limit = min(limit, t.MaxTurns)
	}
	r.Tools = openAITools(tools)
	var lastInfo json.RawMessage
	// toks holds what the server reported of each assistant turn's
	// tokens, by the turn's index in msgs.
	toks := map[int]turnTokens{}
	defer func() { r.Messages = toRows(msgs, toks) }()
	samp := cfg.Rollout.Sampling()
	obs := ep.Observation
	cut := ""
	for turn := 0; turn < limit; turn++ {
		resp, err := backend.Chat(ctx, model.Request{
			Messages: withoutReasoning(msgs), Tools: tools, N: 1, Temperature: samp.Temperature, TopP: samp.TopP, MaxTokens: samp.MaxTokens, Seed: r.Seed,
			Meta: map[string]string{procedural.MetaTask: "agent", procedural.MetaHint: hint, procedural.MetaSeed: fmt.Sprint(r.Seed)},
		})
		if err != nil {
			r.Error = "agent: " + err.Error()
			return
		}
		ch := resp.Choices[0]
		msg := ch.Message
		r.Replies = append(r.Replies, msg.Content)
		r.FinishReasons = append(r.FinishReasons, ch.FinishReason)
		reasoning, answer := model.ReplyParts(msg)
		turnMsg := model.Message{Role: model.RoleAssistant, Content: answer, Reasoning: reasoning, ToolCalls: msg.ToolCalls}
		toks[len(msgs)] = turnTokens{promptTokens: int64(resp.Usage.PromptTokens), tokens: ch.Tokens}
		if ch.FinishReason == model.FinishLength {
			// A reply cut at its token budget is not an action, whatever
			// it holds (half a thought, half a tool call): the play ends
			// as the agent's failure, and the transcript keeps the reply.
			msgs = append(msgs, turnMsg)
			r.Error = fmt.Sprintf("agent: cut at max_tokens (finish_reason length at rollout.max_tokens %d)", samp.MaxTokens)
			r.Termination = schemas.TerminationAgentCut
			return
		}
		act, obsMsg := agentAction(cfg, t, tools, msg, answer, obs, turn, &turnMsg, r)
		msgs = append(msgs, turnMsg)
		r.Actions = append(r.Actions, act)
		var st sandbox.StepResult
		err = g.run(ctx, func() (err error) {
			st, err = ep.Step(ctx, act)
			return err
		})
		if err != nil {
			r.Error = "env step: " + err.Error()
			return
		}
		if why := stepProblem(r.Return, st, lo, hi); why != "" {
			r.Error = why
			return
		}
		r.Turns++
		r.StepRewards = append(r.StepRewards, st.Reward)
		r.Return += st.Reward
		lastInfo = st.Info
		obs = st.Observation
		obsMsg.Content = st.Observation
		msgs = append(msgs, obsMsg)
		if st.Terminated || st.Truncated {
			r.Terminated, r.Truncated = st.Terminated, st.Truncated
			break
		}
		if m := cfg.Rollout.MaxContextTokens; m > 0 && resp.Usage.PromptTokens+resp.Usage.CompletionTokens >= m {
			cut = schemas.TerminationMaxContext
			break
		}
	}
	switch {
	case r.Terminated:
		r.Termination = schemas.TerminationTerminated
	case r.Truncated:
		r.Termination = schemas.TerminationTruncated
	case cut != "":
		r.Termination, r.Truncated = cut, true
	default:
		r.Termination, r.Truncated = schemas.TerminationMaxTurns, true
	}
	r.Success = success(lastInfo, r.Return, r.Termination == schemas.TerminationMaxTurns || r.Termination == schemas.TerminationMaxContext)
}

// declaredTools returns the tools t declares (t.Tools, a JSON list) when
// t is a tool-use target; a list that does not parse declares none. Split
// out of playEpisode.
func declaredTools(t Target) []model.Tool {
	var tools []model.Tool
	if t.ToolUse && t.Tools != "" {
		var decl []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(t.Tools), &decl); err == nil {
			for _, d := range decl {
				tools = append(tools, model.Tool{Name: d.Name, Description: d.Description, Parameters: string(d.Parameters)})
			}
		}
	}
	return tools
}

// agentAction returns the action of the agent's reply msg at turn (answer:
// its content without reasoning; obs: the observation it answers) and the
// message the next observation goes back in; a tool call is sent back as
// the one call acted on (turnMsg), an action not extracted from the text
// is counted in r.Unextracted. Split out of playEpisode.
func agentAction(cfg *config.Config, t Target, tools []model.Tool, msg model.Message, answer, obs string, turn int, turnMsg *model.Message, r *schemas.Rollout) (string, model.Message) {
	act := answer
	obsMsg := model.Message{Role: model.RoleUser}
	if len(msg.ToolCalls) > 0 {
		if _, rest, ok := model.ParseToolCallText(answer, tools); ok {
			// Calls the model wrote as text (model.ParseToolCallText)
			// are sent back as tool_calls, not twice.
			turnMsg.Content = rest
		}
		tc := msg.ToolCalls[0]
		turnMsg.ToolCalls = msg.ToolCalls[:1]
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d", turn)
			turnMsg.ToolCalls[0].ID = tc.ID
		}
		act = toolAction(tc)
		obsMsg = model.Message{Role: model.RoleTool, ToolCallID: tc.ID}
	} else if !t.ToolUse {
		var ok bool
		if act, ok = action.Extract(cfg.Rollout.ActionFormat, answer, obs); !ok {
			r.Unextracted++
		}
	}
	return act, obsMsg
}

// stepProblem says why step st ends the play as an environment failure,
// given the return ret before it and the declared reward range [lo, hi],
// or "" when it does not; split out of playEpisode.
func stepProblem(ret float64, st sandbox.StepResult, lo, hi float64) string {
	if sum := ret + st.Reward; math.IsNaN(sum) || math.IsInf(sum, 0) {
		// A NaN or infinite reward (or a return that overflows) ends
		// the play as an environment failure with its return so far:
		// stored, it would poison the labels' means, and the grpo and
		// metrics stages refuse non-finite values, so one environment
		// would stop the round for good.
		if !math.IsNaN(st.Reward) && !math.IsInf(st.Reward, 0) {
			return fmt.Sprintf("env step: reward %v makes the return overflow", st.Reward)
		}
		return fmt.Sprintf("env step: non-finite reward %v", st.Reward)
	}
	if !envcheck.RewardInRange(st.Reward, lo, hi) {
		// Ends the play like a non-finite reward: a return beyond the
		// declared range would inflate the regret (and the designer
		// reward, which divides by the declared width).
		return fmt.Sprintf("env step: reward %v outside reward_range [%g, %g]", st.Reward, lo, hi)
	}
	if n := len(st.Observation); n > envcheck.DefaultMaxObservationBytes {
		return fmt.Sprintf("env step: observation of %d bytes exceeds %d", n, envcheck.DefaultMaxObservationBytes)
	}
	return ""
}

// withoutReasoning is msgs as sent to the model: reasoning is kept in the
// transcript but never sent back (chat templates such as Qwen3's drop
// past reasoning themselves, and servers do not accept it as input).
func withoutReasoning(msgs []model.Message) []model.Message {
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		m.Reasoning = ""
		out[i] = m
	}
	return out
}

// toolAction turns a tool call into the environment's action text:
// {"name": ..., "arguments": {...}}; malformed argument JSON is passed as a
// string so the environment answers with feedback.
func toolAction(tc model.ToolCall) string {
	var args any = tc.Arguments
	var obj map[string]any
	if err := json.Unmarshal([]byte(tc.Arguments), &obj); err == nil {
		args = obj
	} else if strings.TrimSpace(tc.Arguments) == "" {
		args = map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"name": tc.Name, "arguments": args})
	return string(b)
}

// success is the play's win (docs/regret.md): the final step's
// info["success"] when the environment reports a boolean; else a loss when
// the harness cut the play (harnessCut: the turn limit or the context
// bound ended it while the episode was still running, so a positive
// return is progress, not a win); else a positive return.
func success(info json.RawMessage, ret float64, harnessCut bool) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(info, &m) == nil {
		// A JSON null (Python None) unmarshals into a bool without error
		// and would read as a loss; only true and false are a report.
		var b *bool
		if json.Unmarshal(m["success"], &b) == nil && b != nil {
			return *b
		}
	}
	return !harnessCut && ret > 0
}

// turnTokens is what one agent call reported of its tokens: the prompt
// length (usage) and the server's token ids and log-probs (nil when none).
type turnTokens struct {
	promptTokens int64
	tokens       *model.Tokens
}

// toRows is the transcript as stored: each assistant turn with the
// tokens its call reported (toks, by message index), the prompt ids
// delta-coded against the previous assistant turn (schemas.SharePrompt;
// decoded by schemas.ExpandPrompts).
func toRows(msgs []model.Message, toks map[int]turnTokens) []schemas.Message {
	out := make([]schemas.Message, 0, len(msgs))
	var prev []int64 // previous assistant turn's prompt ++ completion ids
	for i, m := range msgs {
		row := schemas.Message{Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID}
		if len(m.ToolCalls) > 0 {
			b, _ := json.Marshal(m.ToolCalls)
			row.ToolCalls = string(b)
		}
		if tt, ok := toks[i]; ok && m.Role == model.RoleAssistant {
			row.PromptTokens = tt.promptTokens
			if t := tt.tokens; t != nil {
				row.CompletionTokenIDs, row.CompletionLogprobs = t.CompletionIDs, t.Logprobs
				if len(t.PromptIDs) > 0 {
					row.PromptShared, row.PromptTokenIDs = schemas.SharePrompt(prev, t.PromptIDs)
					prev = append(append(make([]int64, 0, len(t.PromptIDs)+len(t.CompletionIDs)), t.PromptIDs...), t.CompletionIDs...)
				} else {
					prev = nil
				}
			} else {
				prev = nil
			}
		}
		out = append(out, row)
	}
	return out
}

// openAITools is the JSON of tools in OpenAI's declaration format
// ([{"type": "function", "function": {"name", "description",
// "parameters"}}]), as the openai backend sends them; "" for none.
func openAITools(tools []model.Tool) string {
	if len(tools) == 0 {
		return ""
	}
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type decl struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	out := make([]decl, 0, len(tools))
	for _, t := range tools {
		f := fn{Name: t.Name, Description: t.Description}
		if p := strings.TrimSpace(t.Parameters); p != "" && json.Valid([]byte(p)) {
			f.Parameters = json.RawMessage(p)
		}
		out = append(out, decl{Type: "function", Function: f})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return ""
	}
	return string(b)
}
