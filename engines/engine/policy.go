package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/openai"
	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// DefaultServeReadyTimeout is model.serve_ready_timeout_s's 0.
const DefaultServeReadyTimeout = 600 * time.Second

// ProceduralID is the checkpoint_id of calls the procedural model answers.
const ProceduralID = "procedural"

// RoleOf is the SPADE role whose backend a model-calling stage uses:
// design -> designer, hint -> hint, rollout -> agent ("" otherwise).
func RoleOf(stage string) string {
	switch stage {
	case "design":
		return config.RoleDesigner
	case "hint":
		return config.RoleHint
	case "rollout":
		return config.RoleAgent
	}
	return ""
}

// Served reports whether role's calls must be answered by the round's
// checkpoint: an openai backend with managed or reload serving. Such a
// stage reads checkpoints of round r-1 (NeedsCheckpoint). It reads the
// model.* settings m only (m.ForRole(role)).
func Served(m config.Model, role string) bool {
	m = m.ForRole(role)
	return m.Backend == config.BackendOpenAI && config.FromCheckpoints(m.Serving)
}

// CheckpointInput is the checkpoints(r-1) input of a stage of round r
// whose role serves the round's policy (optional in round 1, which serves
// grpo.base_checkpoint).
func CheckpointInput(r int) pipeline.Input {
	return pipeline.Input{Table: "checkpoints", Round: r - 1, Optional: r == 1}
}

// RoundPolicy is the policy of round r: the checkpoints row of round r-1,
// or the base checkpoint (CheckpointID "base:<grpo.base_checkpoint>", no
// files) when that input is missing (round 1). Errors: reading the input,
// or a table with other than one row.
func RoundPolicy(ctx context.Context, env *pipeline.Env) (schemas.Checkpoint, error) {
	base := schemas.Checkpoint{CheckpointID: "base:" + env.Config.GRPO.BaseCheckpoint, Trainer: "base"}
	r := env.Round.Round
	if !env.Has("checkpoints", r-1) {
		return base, nil
	}
	rows, err := pipeline.ReadAll(ctx, env, schemas.Checkpoints, "checkpoints", r-1)
	if err != nil {
		return schemas.Checkpoint{}, err
	}
	if len(rows) != 1 {
		return schemas.Checkpoint{}, fmt.Errorf("checkpoints of round %d has %d rows, want 1", r-1, len(rows))
	}
	return rows[0], nil
}

// policyID is the checkpoint_id recorded for role's calls with policy
// ck, from the model.* settings m.
func policyID(m config.Model, role string, ck schemas.Checkpoint) string {
	m = m.ForRole(role)
	switch {
	case m.Backend != config.BackendOpenAI:
		return ProceduralID
	case config.FromCheckpoints(m.Serving):
		return ck.CheckpointID
	default:
		return "fixed:" + m.Name
	}
}

// session is the backend of one stage while it runs.
type session struct {
	backend      model.Backend
	checkpointID string
}

// policyBackend is a served policy: Name is "openai:<checkpoint id>" and
// every answer's model is the checkpoint id, so the tables name the
// policy, not the local path a server was given (transformers serve
// answers "<path>@main"; the cache path is operational and differs
// between machines).
type policyBackend struct {
	*openai.Backend
	id string
}

func (p policyBackend) Name() string { return "openai:" + p.id }

func (p policyBackend) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	resp, err := p.Backend.Chat(ctx, req)
	if err == nil {
		resp.Model = p.id
	}
	var ce *model.CallError
	if errors.As(err, &ce) {
		ce.Backend = p.Name()
	}
	return resp, err
}

// Serve puts the round's policy behind role's backend for the stage env
// runs, and returns the stop function (pipeline.Serving). By the role's
// settings (config.Model.ForRole):
//
//   - procedural: nothing to start;
//   - openai: the round's policy (RoundPolicy) is put behind an endpoint
//     by ServeCheckpoint (fixed: checked; managed: started; reload:
//     loaded), and the stage's calls go to it.
//
// With managed and reload, requests name the served model and an answer
// from another fails as model.ErrStalePolicy. With model.replay nothing
// is started: the recorded calls answer. Errors are ServeCheckpoint's
// and RoundPolicy's.
func (e *Engines) Serve(ctx context.Context, env *pipeline.Env, stage string) (func(), error) {
	role := RoleOf(stage)
	c := e.Config
	m := c.Model.ForRole(role)
	ck, err := RoundPolicy(ctx, env)
	if err != nil {
		return nil, err
	}
	if c.Model.Replay != "" || m.Backend != config.BackendOpenAI {
		e.setSession(stage, nil, policyID(c.Model, role, ck))
		return func() {}, nil
	}
	ep, stopServer, err := e.ServeCheckpoint(ctx, env.Store(), role, ck, ServeTag{Run: env.Round.Run, Round: env.Round.Round, Stage: stage})
	if err != nil {
		return nil, err
	}
	b, err := openai.New(ep.Config)
	if err != nil {
		stopServer()
		return nil, err
	}
	var backend model.Backend = b
	if ep.Controlled {
		backend = policyBackend{Backend: b, id: ep.CheckpointID}
	}
	e.setSession(stage, backend, ep.CheckpointID)
	return func() {
		e.setSession(stage, nil, "")
		b.Close()
		stopServer()
	}, nil
}

// Endpoint is an OpenAI-compatible endpoint that serves one checkpoint
// (ServeCheckpoint).
type Endpoint struct {
	// Config is the role's openai client settings with BaseURL (the API
	// root, http://host:port/v1) and Model (the served model name to put
	// in requests) pointing at the server; CheckModel is set when
	// Controlled.
	Config openai.Config
	// CheckpointID is the checkpoint served: the checkpoints row's id
	// (managed, reload) or "fixed:<model.name>" for a server spade does
	// not control.
	CheckpointID string
	// Controlled is true when spade made the server serve the checkpoint
	// (managed, reload): its answers must name Config.Model, else the
	// weights are not the checkpoint's (model.ErrStalePolicy).
	Controlled bool
}

// ServeTag says who a served checkpoint is for: it names a managed
// server's log file (<run>-round<R>-<stage>-<port>.log) and its log lines.
type ServeTag struct {
	// Run and Round are the run and round the server works for.
	Run   string
	Round int
	// Stage is the stage (or command, e.g. "eval") it serves.
	Stage string
}

// ServeCheckpoint puts checkpoint ck behind an OpenAI-compatible endpoint
// with role's serving settings (config.Model.ForRole(role); the role's
// backend must be openai) and returns it with the function that stops
// what was started (a no-op when nothing was). By model.serving:
//
//   - fixed: one GET /v1/models (openai.Backend.Preflight) at
//     model.base_url, so a server that is down fails in seconds; ck is
//     not what it serves (CheckpointID "fixed:<model.name>");
//   - managed: ck is materialised (trained checkpoints from store into
//     model.checkpoint_cache; the base is grpo.base_checkpoint itself),
//     model.serve_command starts over it on a loopback port, and the call
//     waits until the server serves model.served_model_name
//     (serving.WaitReady); stop ends the server's process group. With
//     Engines.Servers set, a server that an earlier stage of this process
//     started for the same command, served name and checkpoint is reused
//     (checked ready again), and stop leaves it running for the next
//     stage; the pool stops it when another checkpoint is asked for,
//     before the trainer (StopIdleServers) and when it is closed;
//   - reload: ck is materialised, model.reload asks model.base_url to load
//     it, and the server must then serve it.
//
// Errors name the server and, for a managed server, its log file: a
// backend other than openai, a failed preflight, materialisation (a
// checkpoint file missing or altered: pipeline.ErrIntegrity), a server
// that exits or is not ready within model.serve_ready_timeout_s, a
// reload the server refuses or that loads another path
// (model.ErrStalePolicy).
func (e *Engines) ServeCheckpoint(ctx context.Context, store storage.Store, role string, ck schemas.Checkpoint, tag ServeTag) (Endpoint, func(), error) {
	c := e.Config
	m := c.Model.ForRole(role)
	nothing := func() {}
	if m.Backend != config.BackendOpenAI {
		return Endpoint{}, nil, fmt.Errorf("serve %s for %s: the %s role's backend is %s; a checkpoint is served over the OpenAI API (model.backend openai)", ck.CheckpointID, tag.Stage, role, m.Backend)
	}
	ocfg, err := e.openaiConfig(role)
	if err != nil {
		return Endpoint{}, nil, err
	}
	if !config.FromCheckpoints(m.Serving) {
		b, err := openai.New(ocfg)
		if err != nil {
			return Endpoint{}, nil, err
		}
		err = b.Preflight(ctx)
		b.Close()
		if err != nil {
			return Endpoint{}, nil, err
		}
		return Endpoint{Config: ocfg, CheckpointID: policyID(c.Model, role, ck)}, nothing, nil
	}
	dir, err := e.checkpointDir(ctx, store, ck)
	if err != nil {
		return Endpoint{}, nil, err
	}
	ready := DefaultServeReadyTimeout
	if c.Model.ServeReadyTimeoutS > 0 {
		ready = time.Duration(c.Model.ServeReadyTimeoutS * float64(time.Second))
	}
	ph := serving.Placeholders{Checkpoint: dir, ServedModel: ck.CheckpointID}
	served := c.Model.ServedModelName
	if served == "" {
		served = "{served_model}"
	}
	stopServer := nothing
	if m.Serving == config.ServingManaged {
		ocfg.Model = ph.Expand(served, false)
		base, stop, err := e.managed(ctx, ck, ph, ocfg.Model, tag, ready)
		if err != nil {
			return Endpoint{}, nil, err
		}
		ocfg.BaseURL, stopServer = base, stop
	} else {
		rr := serving.ReloadFor(c.Model.Reload)
		ocfg.Model = ph.Expand(served, false)
		if rr.ServesAs == "launch" {
			ocfg.Model = m.Name // the engine keeps its launch name
		}
		pre, err := openai.New(ocfg)
		if err != nil {
			return Endpoint{}, nil, err
		}
		perr := pre.Preflight(ctx)
		pre.Close()
		if perr != nil {
			return Endpoint{}, nil, perr
		}
		rctx, cancel := context.WithTimeout(ctx, ready)
		defer cancel()
		client := &http.Client{}
		if err := serving.Reload(rctx, client, m.BaseURL, os.Getenv(c.Model.APIKeyEnv), rr, ph); err != nil {
			return Endpoint{}, nil, err
		}
		if rr.ServesAs == "launch" {
			// The engine answers with its launch name; what proves the
			// weights is the path it reports having loaded.
			got, err := serving.ModelPath(rctx, client, m.BaseURL)
			if err != nil {
				return Endpoint{}, nil, fmt.Errorf("verify reload: %w", err)
			}
			if got != "" && filepath.Clean(got) != filepath.Clean(dir) {
				return Endpoint{}, nil, fmt.Errorf("%w: after the reload %s reports model_path %s, not %s", model.ErrStalePolicy, m.BaseURL, got, dir)
			}
		}
		if err := serving.WaitReady(ctx, e.Log, nil, m.BaseURL, ocfg.Model, ready); err != nil {
			return Endpoint{}, nil, err
		}
	}
	ocfg.CheckModel = true
	return Endpoint{Config: ocfg, CheckpointID: ck.CheckpointID, Controlled: true}, stopServer, nil
}

// ReuseCheckTimeout bounds the readiness check of a server kept from an
// earlier stage (Pool): one that answered before and is idle answers at
// once; one that does not within this time is stopped and a fresh one
// started.
const ReuseCheckTimeout = 60 * time.Second

// managed starts model.serve_command over the checkpoint ph names (or, with
// Servers set, reuses the server an earlier stage started for the same
// command, served name and checkpoint) and waits until it serves served.
// It returns the server's API root and the function that ends this
// stage's use of it: the server stops, or, pooled, stays up for the next
// stage. Errors: a free port, serving.Start's, and WaitReady's.
func (e *Engines) managed(ctx context.Context, ck schemas.Checkpoint, ph serving.Placeholders, served string, tag ServeTag, ready time.Duration) (string, func(), error) {
	c := e.Config
	baseURL := func(srv *serving.Server) string { return fmt.Sprintf("http://127.0.0.1:%d/v1", srv.Port) }
	start := func() (*serving.Server, error) {
		port := c.Model.ServePort
		if port == 0 {
			var err error
			if port, err = serving.FreePort(); err != nil {
				return nil, err
			}
		}
		p := ph
		p.Port = port
		argv := make([]string, len(c.Model.ServeCommand))
		for i, a := range c.Model.ServeCommand {
			argv[i] = p.Expand(a, false)
		}
		logPath := filepath.Join(e.serveLogDir(), fmt.Sprintf("%s-round%06d-%s-%d.log", tag.Run, tag.Round, tag.Stage, port))
		srv, err := serving.Start(argv, logPath, nil)
		if err != nil {
			return nil, err
		}
		srv.Port = port
		e.log().Info("model server started", "stage", tag.Stage, "checkpoint_id", ck.CheckpointID, "pid", srv.Pid(), "port", port, "log", logPath, "shared", e.Servers != nil)
		return srv, nil
	}
	if e.Servers == nil {
		srv, err := start()
		if err != nil {
			return "", nil, err
		}
		stop := func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*serving.StopGrace)
			defer cancel()
			if err := srv.Stop(sctx); err != nil {
				e.log().Warn("model server stop", "stage", tag.Stage, "error", err)
			}
			e.log().Info("model server stopped", "stage", tag.Stage, "pid", srv.Pid())
		}
		if err := serving.WaitReady(ctx, e.Log, srv, baseURL(srv), served, ready); err != nil {
			stop()
			return "", nil, err
		}
		return baseURL(srv), stop, nil
	}
	// The server's identity: the command over this checkpoint (the port
	// is the pool's choice, not part of it) and the name it serves.
	noPort := ph
	noPort.Port = 0 // {port} stays as written
	key := []string{"id=" + ck.CheckpointID, "served=" + served}
	for _, a := range c.Model.ServeCommand {
		key = append(key, noPort.Expand(a, false))
	}
	poolKey := strings.Join(key, "\x00")
	for {
		lease, err := e.Servers.Acquire(ctx, poolKey, start)
		if err != nil {
			return "", nil, err
		}
		wait := ready
		if lease.Reused {
			e.log().Info("model server reused", "stage", tag.Stage, "checkpoint_id", ck.CheckpointID, "pid", lease.Server.Pid(), "port", lease.Server.Port, "log", lease.Server.LogPath)
			wait = min(ready, ReuseCheckTimeout)
		}
		err = serving.WaitReady(ctx, e.Log, lease.Server, baseURL(lease.Server), served, wait)
		if err == nil {
			return baseURL(lease.Server), lease.Release, nil
		}
		_ = lease.Discard(ctx, "not ready: "+err.Error())
		if !lease.Reused || ctx.Err() != nil {
			return "", nil, err
		}
		e.log().Warn("model server kept from an earlier stage does not answer; starting a fresh one", "stage", tag.Stage, "checkpoint_id", ck.CheckpointID, "error", err)
	}
}

// StopIdleServers stops the managed servers that Servers keeps and no
// stage uses (a no-op without Servers): called before the trainer runs,
// so that it has the accelerator to itself (docs/serving.md "One server
// per round"). A failed stop is logged; the group is SIGKILLed in any case.
func (e *Engines) StopIdleServers(ctx context.Context) {
	if e.Servers == nil {
		return
	}
	if err := e.Servers.StopIdle(ctx, "the trainer takes the accelerator"); err != nil {
		e.log().Warn("model server stop", "error", err)
	}
}

// checkpointDir is the local directory of checkpoint ck: the base
// checkpoint's own directory (which must exist), or the trained one
// materialised into model.checkpoint_cache.
func (e *Engines) checkpointDir(ctx context.Context, store storage.Store, ck schemas.Checkpoint) (string, error) {
	if len(ck.Files) == 0 {
		base := e.Config.GRPO.BaseCheckpoint
		if err := CheckBaseCheckpoint(base); err != nil {
			return "", err
		}
		abs, err := filepath.Abs(base)
		if err != nil {
			return "", err
		}
		return abs, nil
	}
	return serving.Materialize(ctx, store, ck, e.cacheDir())
}

// CheckBaseCheckpoint reports a grpo.base_checkpoint that no trainer or
// server can load: "tiny:SEED" is the trainer's built-in model and passes;
// anything else must be a directory holding config.json (a Hugging Face
// checkpoint). The error names the setting and the path.
func CheckBaseCheckpoint(base string) error {
	if strings.HasPrefix(base, "tiny:") {
		return nil
	}
	fi, err := os.Stat(base)
	if err != nil {
		return fmt.Errorf("grpo.base_checkpoint %s: %w", base, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("grpo.base_checkpoint %s is not a directory (want a Hugging Face checkpoint directory)", base)
	}
	if _, err := os.Stat(filepath.Join(base, "config.json")); err != nil {
		return fmt.Errorf("grpo.base_checkpoint %s holds no config.json: not a Hugging Face checkpoint directory", base)
	}
	return nil
}

func (e *Engines) cacheDir() string {
	if c := e.Config.Model.CheckpointCache; c != "" {
		return c
	}
	return filepath.Join(os.TempDir(), "spade-checkpoints")
}

// serveLogDir holds the managed servers' logs: ServeLogDir, or
// <model.checkpoint_cache>/serve-logs.
func (e *Engines) serveLogDir() string {
	if e.ServeLogDir != "" {
		return e.ServeLogDir
	}
	return filepath.Join(e.cacheDir(), "serve-logs")
}

func (e *Engines) log() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

func (e *Engines) setSession(stage string, b model.Backend, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sessions == nil {
		e.sessions = map[string]session{}
	}
	if id == "" {
		delete(e.sessions, stage)
		return
	}
	e.sessions[stage] = session{backend: b, checkpointID: id}
}

func (e *Engines) sessionOf(stage string) (session, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[stage]
	return s, ok
}

// TrainerImports are the modules the torch trainer imports; CheckTrainer
// asks grpo.python for them.
var TrainerImports = []string{"torch"}

// CheckTrainer reports, before a round starts any stage, what would fail
// only at its grpo stage (after every model call of the round) or at its
// first served stage: with grpo.trainer other than none, or with any role
// served from checkpoints (managed, reload), grpo.base_checkpoint must be
// loadable (CheckBaseCheckpoint); with grpo.trainer torch, grpo.python
// must exist and import TrainerImports. Errors name the setting, the path
// and, for a failed import, the interpreter's output.
func CheckTrainer(ctx context.Context, c *config.Config) error {
	served := false
	for _, r := range config.RoleNames {
		served = served || Served(c.Model, r)
	}
	if c.GRPO.Trainer == config.TrainerNone && !served {
		return nil
	}
	if err := CheckBaseCheckpoint(c.GRPO.BaseCheckpoint); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	if c.GRPO.Trainer != config.TrainerTorch {
		return nil
	}
	if _, err := os.Stat(c.GRPO.Python); err != nil {
		return fmt.Errorf("invalid configuration: grpo.python: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	code := "import " + strings.Join(TrainerImports, ", ")
	if out, err := exec.CommandContext(cctx, c.GRPO.Python, "-c", code).CombinedOutput(); err != nil {
		return fmt.Errorf("invalid configuration: grpo.python %s cannot %q (the torch trainer needs it; see docs/training.md): %v: %s", c.GRPO.Python, code, err, strings.TrimSpace(serving.TailText(string(out), 5)))
	}
	return nil
}
