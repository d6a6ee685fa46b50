package serving

import (
	"context"
	"errors"
	"log/slog"
	"sync"
)

// Pool keeps the managed servers of one process for reuse by its later
// stages (docs/serving.md "One server per round"): `spade round` owns one,
// so that design, hint and rollout of a round, all served by the same
// checkpoint with the same settings, share one server start. A server is
// known by a key that says what it serves and how it was started (the
// caller's choice: the expanded command line without the port, the served
// name, the checkpoint id). The zero Pool is ready to use; its methods are
// safe for concurrent use.
type Pool struct {
	// Log receives one "model server stopped" line per server the pool
	// stops; nil means slog.Default().
	Log *slog.Logger

	mu      sync.Mutex
	servers map[string]*pooled
	starts  int
	closed  bool
}

type pooled struct {
	srv   *Server
	users int
}

// Lease is one user's hold on a server of a Pool (Pool.Acquire). While a
// lease is held, the pool stops its server only in Close.
type Lease struct {
	// Server is the leased server.
	Server *Server
	// Reused is true when the server was already running for the key
	// (started by an earlier lease), false when this Acquire started it.
	Reused bool

	pool *Pool
	key  string
	once sync.Once
}

// ErrPoolClosed is Acquire's error after Close.
var ErrPoolClosed = errors.New("serve: the server pool is closed")

// Acquire returns a lease on the pool's server for key. A server kept
// under key whose process still runs is reused (Lease.Reused). Otherwise
// every server of another key that no lease holds is stopped first (one
// accelerator: the previous checkpoint's server gives way to the next
// one), start runs, and the server it returns is kept under key. The pool
// lock is held while start runs, so two Acquires never start two servers
// for one key. Errors: start's, ErrPoolClosed after Close, and ctx's when
// it is done before start runs.
func (p *Pool) Acquire(ctx context.Context, key string, start func() (*Server, error)) (*Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.servers == nil {
		p.servers = map[string]*pooled{}
	}
	if e, ok := p.servers[key]; ok {
		select {
		case <-e.srv.Exited():
			// It died since its last stage: drop it and start anew.
			p.stopLocked(ctx, key, "exited")
		default:
			e.users++
			return &Lease{Server: e.srv, Reused: true, pool: p, key: key}, nil
		}
	}
	for k, e := range p.servers {
		if e.users == 0 {
			p.stopLocked(ctx, k, "another checkpoint or serving setting is asked for")
		}
	}
	srv, err := start()
	if err != nil {
		return nil, err
	}
	p.starts++
	p.servers[key] = &pooled{srv: srv, users: 1}
	return &Lease{Server: srv, pool: p, key: key}, nil
}

// Release ends the lease and keeps the server running for the next
// Acquire of its key (until StopIdle, Close, or an Acquire of another
// key). Idempotent.
func (l *Lease) Release() {
	l.once.Do(func() {
		l.pool.mu.Lock()
		defer l.pool.mu.Unlock()
		if e, ok := l.pool.servers[l.key]; ok && e.srv == l.Server && e.users > 0 {
			e.users--
		}
	})
}

// Discard ends the lease and stops its server, which leaves the pool (a
// server that failed its readiness check: the next Acquire of the key
// starts a fresh one). Other holders of the same server see it exit.
// Idempotent with Release: whichever runs first ends the lease. Errors:
// Server.Stop's.
func (l *Lease) Discard(ctx context.Context, why string) error {
	var err error
	l.once.Do(func() {
		l.pool.mu.Lock()
		defer l.pool.mu.Unlock()
		if e, ok := l.pool.servers[l.key]; ok && e.srv == l.Server {
			err = l.pool.stopLocked(ctx, l.key, why)
			return
		}
		err = l.Server.Stop(ctx)
	})
	return err
}

// StopIdle stops every server that no lease holds (before a stage that
// needs the accelerator to itself: the trainer). why is logged. Errors:
// the first Server.Stop error; every idle server is stopped regardless.
func (p *Pool) StopIdle(ctx context.Context, why string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for k, e := range p.servers {
		if e.users == 0 {
			if err := p.stopLocked(ctx, k, why); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Close stops every server of the pool, held or not, and refuses later
// Acquires (ErrPoolClosed). Idempotent. Errors: the first Server.Stop
// error; every server is stopped regardless.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var first error
	for k := range p.servers {
		if err := p.stopLocked(ctx, k, "the process is done with its servers"); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Starts is how many servers the pool has started (successful start
// calls of Acquire) since it was made.
func (p *Pool) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Running is how many servers the pool keeps now (held or idle).
func (p *Pool) Running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.servers)
}

// stopLocked stops the server kept under key and forgets it; p.mu is held.
func (p *Pool) stopLocked(ctx context.Context, key, why string) error {
	e := p.servers[key]
	delete(p.servers, key)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*StopGrace)
	defer cancel()
	err := e.srv.Stop(sctx)
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	if err != nil {
		log.Warn("model server stop", "pid", e.srv.Pid(), "port", e.srv.Port, "error", err)
	}
	log.Info("model server stopped", "pid", e.srv.Pid(), "port", e.srv.Port, "why", why)
	return err
}
