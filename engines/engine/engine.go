// Package engine holds the engines stages share (docs/design.md "Engines the
// stages share"): the Python sandbox, the model backend (with record and
// replay of every call), opened lazily on first use and closed once.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/openai"
	"github.com/spade-pipeline/spade/engines/model/procedural"
	"github.com/spade-pipeline/spade/engines/model/replay"
	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// Engines is shared by the stages of one process. Zero values of its
// fields are filled lazily from Config.
type Engines struct {
	// Config is the run's config (required); the sandbox and the backend
	// are built from it on first use.
	Config *config.Config
	// Store is the run's store; replay reads the replayed run's calls from
	// it.
	Store storage.Store
	// Log receives the sandbox's warnings and diagnostics and the openai
	// backend's outage warnings; nil means slog.Default().
	Log *slog.Logger

	// ServeLogDir is where managed model servers write their logs (""
	// means <model.checkpoint_cache>/serve-logs).
	ServeLogDir string

	// Servers, when set, keeps managed model servers for reuse by the
	// later stages of this process (docs/serving.md "One server per
	// round"): `spade round` sets it and closes it when the round ends,
	// so the stages of a round served by one checkpoint with the same
	// settings share one server. nil (`spade stage`, `spade eval`)
	// starts one server per ServeCheckpoint and stops it with the stage.
	Servers *serving.Pool

	mu       sync.Mutex
	sb       *sandbox.Sandbox
	backends map[string]model.Backend // by role
	replays  map[string]*replay.Replayer
	sessions map[string]session // by stage, while Serve's stop has not run
	tasks    *Limiter           // InFlight places, made on first use
	cpu      *Limiter           // Workers places, made on first use
	meter    CallMeter
}

func isRoot() bool { return os.Geteuid() == 0 }

func (e *Engines) logger() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

// Workers is the effective parallelism of the sandbox: config workers, or
// with workers 0 the number of CPUs, at most sandbox.UIDStride (512).
func (e *Engines) Workers() int {
	if e.Config.Workers > 0 {
		return e.Config.Workers
	}
	// Not above what the sandbox can give separate uids as root (a
	// machine with more CPUs than that would fail every sandbox start).
	return min(runtime.NumCPU(), sandbox.UIDStride)
}

// Sandbox returns the shared sandbox, creating it on first use, with
// SandboxSlots slots. Errors:
// sandbox.ErrNoIsolation in strict mode without bubblewrap; interpreter
// problems.
func (e *Engines) Sandbox() (*sandbox.Sandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sb != nil {
		return e.sb, nil
	}
	c := e.Config.Sandbox
	sb, err := sandbox.New(sandbox.Config{
		Python:      c.Python,
		Strict:      c.Strict,
		Workers:     e.SandboxSlots(),
		CallTimeout: time.Duration(c.CallTimeoutS * float64(time.Second)),
		MemoryBytes: int64(c.MemoryMB) << 20,
		Logger:      e.Log,

		ForkEpisodes:       c.ForkEpisodes,
		ProgramsPerSandbox: c.ProgramsPerSandbox,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	e.sb = sb
	return sb, nil
}

// CheckConfig reports, before anything runs, a setting the configured
// model cannot serve: with model.backend procedural (and no model.replay),
// every sample.skills entry must be a skill the procedural designer knows
// (procedural.Skills, docs/method.md step 2); any other would fail every design
// of its slots and leave the round with an empty pool. The error names the
// setting and the skills allowed. model.replay, when set, must be a valid
// run name (pipeline.ValidateRunName): any other text would only fail the
// design stage after the round's first stages ran. As root, workers may
// not exceed sandbox.UIDStride (sandbox.New's limit).
func CheckConfig(c *config.Config) error {
	if c.Model.Replay != "" {
		if err := pipeline.ValidateRunName(c.Model.Replay); err != nil {
			return fmt.Errorf("invalid configuration: model.replay: %w", err)
		}
	}
	if os.Geteuid() == 0 && c.Workers > sandbox.UIDStride {
		// As root every sandbox slot runs under its own uid, from a range
		// of sandbox.UIDStride per process; sandbox.New refuses more, which
		// failed the design stage after the round's first stages ran.
		return fmt.Errorf("invalid configuration: workers must be <= %d when spade runs as root (one uid per sandbox slot, %d per process; got %d)", sandbox.UIDStride, sandbox.UIDStride, c.Workers)
	}
	if c.Model.ForRole(config.RoleDesigner).Backend != config.BackendProcedural || c.Model.Replay != "" {
		return nil
	}
	for i, s := range c.Sample.Skills {
		if !slices.Contains(procedural.Skills, s) {
			return fmt.Errorf("invalid configuration: sample.skills[%d] %q is not a skill the procedural model designs for (%s); model.backend openai takes any skill name",
				i, s, strings.Join(procedural.Skills, ", "))
		}
	}
	return nil
}

// CheckReplay reports, before anything runs, a model.replay run that
// does not exist in store (no _RUN.json): every stage that calls the
// model would fail on its first recorded-calls table, after the round's
// earlier stages committed. It returns nil without model.replay. Errors
// wrap pipeline.ReadRunFile's, prefixed "invalid configuration:
// model.replay:": pipeline.ErrNotCommitted for a run that does not exist,
// the store's error when it cannot be read, and a decoding error for a
// damaged run file.
func CheckReplay(ctx context.Context, store storage.Store, c *config.Config) error {
	if c.Model.Replay == "" {
		return nil
	}
	if _, err := pipeline.ReadRunFile(ctx, store, c.Model.Replay); err != nil {
		return fmt.Errorf("invalid configuration: model.replay: %w", err)
	}
	return nil
}

// Backend returns the model.* backend (not recording), built on first
// use and then shared: BackendFor("").
func (e *Engines) Backend() (model.Backend, error) { return e.BackendFor("") }

// BackendFor returns the backend of role (config.Model.ForRole: model.*
// with model.roles.<role> applied; "" for model.* itself), built on first
// use and then shared. Errors: openai.New's, unwrapped (an empty
// model.name, a negative model.concurrency or model.timeout_s), or an
// error naming an unknown model.backend; a failed build is not cached, so
// the next call tries again.
func (e *Engines) BackendFor(role string) (model.Backend, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.backends[role]; b != nil {
		return b, nil
	}
	c := e.Config.Model.ForRole(role)
	var backend model.Backend
	switch c.Backend {
	case config.BackendProcedural:
		backend = procedural.New()
	case config.BackendOpenAI:
		ocfg, err := e.openaiConfig(role)
		if err != nil {
			return nil, err
		}
		b, err := openai.New(ocfg)
		if err != nil {
			return nil, err
		}
		backend = b
	default:
		return nil, fmt.Errorf("unknown model backend %q", c.Backend)
	}
	if e.backends == nil {
		e.backends = map[string]model.Backend{}
	}
	e.backends[role] = backend
	return backend, nil
}

// openaiConfig is the openai backend configuration of role
// (config.Model.ForRole): server, name, key variable, concurrency,
// timeout, retries, model.extra_body, model.tool_choice and
// model.token_ids (config.Config.WantTokenIDs). Every openai backend of a
// role is built from it, the policy-serving ones of Serve included (which
// then set the served base URL and model name). Errors: model.extra_body
// that is not a JSON object.
func (e *Engines) openaiConfig(role string) (openai.Config, error) {
	c := e.Config.Model.ForRole(role)
	retries := c.MaxRetries
	if retries == 0 {
		retries = -1 // the config's 0 means none; openai.Config's 0 means its default
	}
	extra, err := c.ExtraBodyFields()
	if err != nil {
		return openai.Config{}, err
	}
	return openai.Config{
		BaseURL: c.BaseURL, Model: c.Name, APIKeyEnv: c.APIKeyEnv, Concurrency: c.Concurrency,
		Timeout: time.Duration(c.TimeoutS * float64(time.Second)), MaxRetries: retries,
		Logger: e.Log, ExtraBody: extra, ToolChoice: c.ToolChoice, ReturnTokens: e.Config.WantTokenIDs(role),
	}, nil
}

// CallsTable returns the llm_calls table name of a stage.
func CallsTable(stage string) string { return stage + "_calls" }

// StageModel is the backend one stage part uses: every call is recorded,
// and with replay a miss is remembered so the stage fails instead of
// recording it as a row error (a replay must reproduce, not improvise).
//
// It also watches for an outage of the model server (not when replaying):
// after model.unavailable_after calls in a row that failed with a
// transient error past their retries (model.Transient), and the server
// then not answering a probe (the backend's Probe; without one, at once),
// later calls fail at once without reaching the server, and Emit fails
// the stage with an error wrapping model.ErrUnavailable (a server that
// answers the probe resets the count); so does a stage part whose every
// call (two or more) failed that way, and one that ends on such failures while the
// server does not answer a probe (a server that went down near the end of
// the part). A stage that fails commits nothing, so an outage leaves the
// round resumable instead of committing a round of errors.
type StageModel struct {
	*replay.Recorder
	// CheckpointID is the policy that answers the stage's calls, for the
	// checkpoint_id column of its rows (Serve; "" when the stage was not
	// served, e.g. a test calling ForStage alone).
	CheckpointID string
	stage        string
	watch        bool                            // whether to watch for an outage (not with replay)
	after        int                             // model.unavailable_after; 0: no early stop
	probe        func(ctx context.Context) error // asks whether the server answers; nil: cannot ask
	timeout      time.Duration                   // model.timeout_s, named in the error of timed-out parts

	meter *CallMeter   // the process's, counted as calls start and end
	log   *slog.Logger // receives the part's call summary at Emit

	mu        sync.Mutex
	first     time.Time     // when the part's first call started
	lastEnd   time.Time     // when its latest call ended
	busy      time.Duration // the sum of its calls' durations
	made      int           // its calls, replayed ones included
	miss      error
	down      error // set once the server is taken to be down
	calls     int   // calls made through the Recorder
	transient int   // of which failed transiently past their retries
	inARow    int   // transient failures since the last other outcome
	last      error // the last transient failure
	probing   bool  // a probe after model.unavailable_after failures in a row is under way
}

// Chat implements model.Backend. Once the server is taken to be down it
// returns an error wrapping model.ErrUnavailable without calling it.
func (m *StageModel) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	m.mu.Lock()
	down := m.down
	m.mu.Unlock()
	if down != nil {
		return model.Response{}, down
	}
	start := time.Now()
	if m.meter != nil {
		m.meter.inFlight.Add(1)
	}
	resp, err := m.Recorder.Chat(ctx, req)
	end := time.Now()
	if m.meter != nil {
		m.meter.inFlight.Add(-1)
		m.meter.done.Add(1)
	}
	m.mu.Lock()
	probe := false
	defer func() {
		m.mu.Unlock()
		if probe {
			m.probeRun(ctx, err)
		}
	}()
	if m.made == 0 || start.Before(m.first) {
		m.first = start
	}
	if end.After(m.lastEnd) {
		m.lastEnd = end
	}
	m.busy += end.Sub(start)
	m.made++
	if errors.Is(err, replay.ErrMiss) && m.miss == nil {
		m.miss = err
	}
	if m.watch && ctx.Err() == nil {
		m.calls++
		if model.Transient(err) {
			m.transient++
			m.inARow++
			m.last = err
			if m.after > 0 && m.inARow >= m.after && m.down == nil && !m.probing {
				if m.probe == nil {
					m.down = fmt.Errorf("%w: %d calls in a row failed after their retries (model.unavailable_after), the last with: %w", model.ErrUnavailable, m.inARow, err)
				} else {
					m.probing, probe = true, true
				}
			}
		} else {
			m.inARow = 0
		}
	}
	return resp, err
}

// probeRun asks the server whether it answers, after model.unavailable_after
// calls in a row failed (the last with last): when it does not, the
// server is taken to be down; when it does, the failures were those
// requests' own (a few environments' prompts failing together, as they do
// when their plays are in flight together), the count starts again and the
// stage goes on with the errors on their rows. Which of the two happens
// thus follows the server's state, not the order in which concurrent
// calls ended.
func (m *StageModel) probeRun(ctx context.Context, last error) {
	perr := m.probe(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probing = false
	n := m.inARow
	switch {
	case ctx.Err() != nil:
	case perr != nil:
		if m.down == nil {
			m.down = fmt.Errorf("%w: %d calls in a row failed after their retries (model.unavailable_after) and the server does not answer (%w); the last with: %w", model.ErrUnavailable, n, perr, last)
		}
	default:
		m.inARow = 0
		if m.log != nil {
			m.log.Warn("model calls failing while the server answers", "stage", m.stage, "in_a_row", n, "last", last.Error())
		}
	}
}

// Err is the error that fails the stage instead of committing it, nil if
// none: the first replay miss (wrapping replay.ErrMiss), or an outage of
// the model server (wrapping model.ErrUnavailable): the early stop after
// model.unavailable_after transient failures in a row and a probe the
// server did not answer (or none, for a backend without Probe); every
// call of the part (two or more, or one when the server cannot be probed)
// failed transiently; or the part ended on transient failures and
// the server does not answer a probe now (the backend's Probe, e.g.
// openai.Backend.Probe). Parts whose failures were followed by answers
// commit, with the errors on their rows.
func (m *StageModel) Err(ctx context.Context) error {
	m.mu.Lock()
	miss, down := m.miss, m.down
	calls, transient, inARow, last := m.calls, m.transient, m.inARow, m.last
	m.mu.Unlock()
	if miss != nil {
		return fmt.Errorf("stage %s: %w", m.stage, miss)
	}
	// A part of one call is left to the probe below: a single prompt the
	// server cannot answer in time (while it answers the probe) would
	// otherwise fail the stage on every rerun.
	if down == nil && m.watch && (calls > 1 || calls == 1 && m.probe == nil) && transient == calls {
		down = fmt.Errorf("%w: all %d calls of the stage part failed after their retries, the last with: %w", model.ErrUnavailable, calls, last)
		if errors.Is(last, model.ErrTimeout) {
			// Prompts the server cannot answer in time fail the same way on
			// every rerun; the timeout is operational, so it can change.
			down = fmt.Errorf("%w (if the server answers but too slowly, raise model.timeout_s, now %s, before the rerun)", down, m.timeout)
		}
	}
	if down == nil && m.watch && inARow > 0 && m.probe != nil {
		if perr := m.probe(ctx); perr != nil && ctx.Err() == nil {
			down = fmt.Errorf("%w: the stage part ended on %d failed calls in a row and the server does not answer (%w); the last call failed with: %w", model.ErrUnavailable, inARow, perr, last)
		}
	}
	if down != nil {
		return fmt.Errorf("%w; the stage is not committed: run the round again once the server answers", down)
	}
	return nil
}

// Emit writes the recorded calls as rows of the stage's llm_calls table
// (latency only when the run records timings). It returns Err instead
// when that is not nil, so that the stage fails and commits nothing.
//
// It also logs the part's calls at INFO ("model calls": calls, mean calls
// in flight = the calls' summed durations over the span from the first
// call's start to the last one's end, and calls/s over that span), which
// says whether the part kept the server busy; logs are not data.
func (m *StageModel) Emit(ctx context.Context, out *pipeline.Out, cfg *config.Config) error {
	m.logSummary(cfg)
	if err := m.Err(ctx); err != nil {
		return err
	}
	calls := m.Calls()
	rows := make([]schemas.LLMCall, 0, len(calls))
	for _, c := range calls {
		row := schemas.LLMCall{RequestHash: c.RequestHash, Occurrence: c.Occurrence, Stage: m.stage, Backend: c.Backend, CheckpointID: m.CheckpointID, Request: c.Request, Response: c.Response, Error: c.Error}
		if cfg.Observe.Timings {
			ms := c.LatencyMS
			row.LatencyMS = &ms
		}
		rows = append(rows, row)
	}
	pipeline.Emit(out, schemas.LLMCalls, CallsTable(m.stage), rows...)
	return nil
}

func (m *StageModel) logSummary(cfg *config.Config) {
	m.mu.Lock()
	made, busy, span := m.made, m.busy, m.lastEnd.Sub(m.first)
	m.mu.Unlock()
	if m.log == nil || made == 0 || span <= 0 {
		return
	}
	m.log.Info("model calls", "stage", m.stage, "calls", made, "seconds", round3(span.Seconds()),
		"mean_in_flight", round3(busy.Seconds()/span.Seconds()), "concurrency", cfg.Model.Concurrency,
		"calls_per_s", round3(float64(made)/span.Seconds()))
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// ForStage returns the backend a stage of round r uses, recording every
// call: the configured backend, or with model.replay set, a replayer over
// the replayed run's recorded calls of the same stage and round (a miss
// fails the stage with an error wrapping replay.ErrMiss).
func (e *Engines) ForStage(ctx context.Context, stage string, round int) (*StageModel, error) {
	sess, _ := e.sessionOf(stage)
	if e.Config.Model.Replay == "" {
		b := sess.backend
		if b == nil {
			var err error
			if b, err = e.BackendFor(RoleOf(stage)); err != nil {
				return nil, err
			}
		}
		sm := &StageModel{Recorder: replay.NewRecorder(b), CheckpointID: sess.checkpointID, stage: stage, watch: true, after: e.Config.Model.UnavailableAfter,
			timeout: time.Duration(e.Config.Model.TimeoutS * float64(time.Second)), meter: &e.meter, log: e.logger()}
		if p, ok := b.(interface{ Probe(context.Context) error }); ok {
			sm.probe = p.Probe
		}
		return sm, nil
	}
	key := fmt.Sprintf("%s@%d", stage, round)
	e.mu.Lock()
	rp := e.replays[key]
	e.mu.Unlock()
	if rp == nil {
		m, err := pipeline.ReadManifest(ctx, e.Store, pipeline.ManifestKey(e.Config.Model.Replay, round, CallsTable(stage)))
		if err != nil {
			return nil, fmt.Errorf("replay run %s round %d stage %s: %w", e.Config.Model.Replay, round, stage, err)
		}
		rows, err := pipeline.ReadManifestRows(ctx, e.Store, schemas.LLMCalls, m)
		if err != nil {
			return nil, err
		}
		name := ""
		calls := make([]replay.Call, 0, len(rows))
		for _, r := range rows {
			name = r.Backend
			calls = append(calls, replay.Call{RequestHash: r.RequestHash, Occurrence: r.Occurrence, Backend: r.Backend, Request: r.Request, Response: r.Response, Error: r.Error})
		}
		if rp, err = replay.NewReplayer(name, calls); err != nil {
			return nil, err
		}
		e.mu.Lock()
		if e.replays == nil {
			e.replays = map[string]*replay.Replayer{}
		}
		e.replays[key] = rp
		e.mu.Unlock()
	}
	return &StageModel{Recorder: replay.NewRecorder(rp), CheckpointID: sess.checkpointID, stage: stage, meter: &e.meter, log: e.logger()}, nil
}

// MetaJSON encodes v for a model.Request.Meta value.
func MetaJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("engine: meta JSON: " + err.Error())
	}
	return string(b)
}

// Close releases the sandbox and the model backend's idle connections
// (a backend with a Close method, such as openai's). Returns the
// sandbox's error.
func (e *Engines) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.backends {
		if c, ok := b.(interface{ Close() }); ok {
			c.Close()
		}
	}
	e.backends = nil
	if e.sb != nil {
		err := e.sb.Close()
		e.sb = nil
		return err
	}
	return nil
}
