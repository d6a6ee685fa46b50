// Package engine holds the engines stages share (DESIGN.md "Engines the
// stages share"): the Python sandbox, the model backend (with record and
// replay of every call), opened lazily on first use and closed once.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/model"
	"github.com/spade-pipeline/spade/stages/model/openai"
	"github.com/spade-pipeline/spade/stages/model/procedural"
	"github.com/spade-pipeline/spade/stages/model/replay"
	"github.com/spade-pipeline/spade/stages/sandbox"
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
	// Log receives the sandbox's warnings and diagnostics; nil means
	// slog.Default().
	Log *slog.Logger

	mu      sync.Mutex
	sb      *sandbox.Sandbox
	backend model.Backend
	replays map[string]*replay.Replayer
}

// Workers is the effective parallelism (config workers, or CPUs).
func (e *Engines) Workers() int {
	if e.Config.Workers > 0 {
		return e.Config.Workers
	}
	return runtime.NumCPU()
}

// Sandbox returns the shared sandbox, creating it on first use. Errors:
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
		Workers:     e.Workers(),
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

// Backend returns the configured model backend (not recording).
func (e *Engines) Backend() (model.Backend, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.backend != nil {
		return e.backend, nil
	}
	c := e.Config.Model
	switch c.Backend {
	case "procedural":
		e.backend = procedural.New()
	case "openai":
		retries := c.MaxRetries
		if retries == 0 {
			retries = -1 // the config's 0 means none; openai.Config's 0 means its default
		}
		b, err := openai.New(openai.Config{
			BaseURL: c.BaseURL, Model: c.Name, APIKeyEnv: c.APIKeyEnv, Concurrency: c.Concurrency,
			Timeout: time.Duration(c.TimeoutS * float64(time.Second)), MaxRetries: retries,
		})
		if err != nil {
			return nil, err
		}
		e.backend = b
	default:
		return nil, fmt.Errorf("unknown model backend %q", c.Backend)
	}
	return e.backend, nil
}

// CallsTable returns the llm_calls table name of a stage.
func CallsTable(stage string) string { return stage + "_calls" }

// StageModel is the backend one stage part uses: every call is recorded,
// and with replay a miss is remembered so the stage fails instead of
// recording it as a row error (a replay must reproduce, not improvise).
type StageModel struct {
	*replay.Recorder
	stage string
	mu    sync.Mutex
	miss  error
}

// Chat implements model.Backend.
func (m *StageModel) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	resp, err := m.Recorder.Chat(ctx, req)
	if errors.Is(err, replay.ErrMiss) {
		m.mu.Lock()
		if m.miss == nil {
			m.miss = err
		}
		m.mu.Unlock()
	}
	return resp, err
}

// Emit writes the recorded calls as rows of the stage's llm_calls table
// (latency only when the run records timings). It returns the first replay
// miss instead, so that the stage fails and commits nothing.
func (m *StageModel) Emit(out *pipeline.Out, cfg *config.Config) error {
	m.mu.Lock()
	miss := m.miss
	m.mu.Unlock()
	if miss != nil {
		return fmt.Errorf("stage %s: %w", m.stage, miss)
	}
	calls := m.Calls()
	rows := make([]schemas.LLMCall, 0, len(calls))
	for _, c := range calls {
		row := schemas.LLMCall{RequestHash: c.RequestHash, Occurrence: c.Occurrence, Stage: m.stage, Backend: c.Backend, Request: c.Request, Response: c.Response, Error: c.Error}
		if cfg.Observe.Timings {
			ms := c.LatencyMS
			row.LatencyMS = &ms
		}
		rows = append(rows, row)
	}
	pipeline.Emit(out, schemas.LLMCalls, CallsTable(m.stage), rows...)
	return nil
}

// ForStage returns the backend a stage of round r uses, recording every
// call: the configured backend, or with model.replay set, a replayer over
// the replayed run's recorded calls of the same stage and round (a miss
// fails the stage with an error wrapping replay.ErrMiss).
func (e *Engines) ForStage(ctx context.Context, stage string, round int) (*StageModel, error) {
	if e.Config.Model.Replay == "" {
		b, err := e.Backend()
		if err != nil {
			return nil, err
		}
		return &StageModel{Recorder: replay.NewRecorder(b), stage: stage}, nil
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
	return &StageModel{Recorder: replay.NewRecorder(rp), stage: stage}, nil
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
	if c, ok := e.backend.(interface{ Close() }); ok {
		c.Close()
	}
	e.backend = nil
	if e.sb != nil {
		err := e.sb.Close()
		e.sb = nil
		return err
	}
	return nil
}
