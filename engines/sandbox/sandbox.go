// Package sandbox runs untrusted, LLM-written Python environments (docs/method.md
// steps 3-6: the designer's code is executed thousands of times by the
// validate and rollout stages) in isolated, resource-limited worker
// processes, with every deadline owned by Go.
//
// Each sandbox slot runs bubblewrap (user, pid, net, ipc, uts, mount and
// cgroup namespaces; read-only /usr; a private size-limited /tmp; scrubbed
// environment; all capabilities dropped) around a Python harness that
// applies rlimits (CPU, address space, file size, open files, processes, no
// core dumps) and, as the pid namespace's init, serves as a zygote: every
// program gets a fresh process forked from it, and between programs the
// zygote kills every other process and restores /tmp, /dev/shm and /dev, or
// the whole sandbox is replaced. Episodes run in the program's process with
// a fresh instance each (or, with Config.ForkEpisodes, in a forked child).
// Requests and replies travel as length-prefixed JSON frames on dedicated
// fds, so output on stdout cannot forge a reply. A call that passes its
// wall-clock timeout gets the whole sandbox SIGKILLed; nothing inside it
// survives.
//
// Without bubblewrap the sandbox warns loudly and runs with rlimits (and, as
// root, a dedicated uid) only; Config.Strict refuses instead. See
// docs/sandbox.md for the threat model and measured throughput.
package sandbox

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spade-pipeline/spade/internal/textcut"
)

//go:embed python/spade_harness.py python/spade_isolation.py python/spade_zygote.py python/spade_run.py python/spade_env/__init__.py
var pythonFiles embed.FS

// Config configures a Sandbox. Zero fields take the defaults documented on
// each field.
type Config struct {
	// Python is the interpreter, outside any home directory (the sandbox
	// hides homes). Default /usr/bin/python3 (Python >= 3.10).
	Python string
	// Bwrap is the bubblewrap binary. Default: /usr/bin/bwrap, else bwrap on
	// PATH.
	Bwrap string
	// NoBwrap forces the rlimits-only fallback even when bubblewrap works
	// (for tests and for hosts where namespaces are known to be unavailable).
	NoBwrap bool
	// Strict makes New fail with ErrNoIsolation instead of falling back to
	// rlimits only when bubblewrap is missing or cannot create namespaces.
	Strict bool
	// Workers is how many programs may be loaded at once (sandbox slots);
	// Load blocks while all are taken. Default 2.
	Workers int
	// CallTimeout is the wall-clock limit of one reset, step or close call.
	// Default 5s.
	CallTimeout time.Duration
	// LoadTimeout is the wall-clock limit for starting a sandbox and loading
	// (compiling and executing) a program. Default 10s.
	LoadTimeout time.Duration
	// CPUSeconds is RLIMIT_CPU per process, in CPU seconds. Default 10.
	CPUSeconds int
	// MemoryBytes is RLIMIT_AS per process, in bytes. Default 512 MiB.
	MemoryBytes int64
	// FileSizeBytes is RLIMIT_FSIZE, the largest file a process may write,
	// in bytes. Default 4 MiB.
	FileSizeBytes int64
	// TmpfsBytes is the size of the sandbox's private /tmp, in bytes.
	// Default 16 MiB.
	TmpfsBytes int64
	// OpenFiles is RLIMIT_NOFILE. Default 64.
	OpenFiles int
	// Processes is RLIMIT_NPROC inside the sandbox (threads count). Default
	// 32. Enforced only where the count is isolated: inside bubblewrap's
	// user namespace, or under a per-slot uid when running as root.
	Processes int
	// OutputBytes caps the sandbox's captured stdout+stderr, in bytes; more
	// output kills the sandbox (KindOutputLimit). Default 256 KiB.
	OutputBytes int64
	// ReplyBytes caps one reply frame (observation + info), in bytes; a
	// larger reply is refused (KindReplyLimit). Default 1 MiB.
	ReplyBytes int
	// ForkEpisodes runs every episode in a forked child of the loaded
	// program (the strictest isolation between episodes: nothing an episode
	// does outlives it) instead of in the program's process with a fresh
	// instance. Forking costs ~400 copy-on-write page faults per episode,
	// 15-30 ms of CPU on a paravirtualised VM (docs/benchmarks.md); in
	// process an episode costs well under 1 ms, but state a program keeps
	// outside its instances (class attributes, module globals, threads)
	// carries over between its episodes, which the validator's
	// determinism check screens for. Default false.
	ForkEpisodes bool
	// ProgramsPerSandbox is how many programs one bubblewrap sandbox serves
	// one after another before it is replaced. Each program runs in a fresh
	// process forked from the sandbox's zygote, which never runs untrusted
	// code; between programs every other process of the sandbox is killed,
	// /tmp and /dev/shm are emptied and /dev is checked, and a sandbox that
	// cannot be restored is replaced at once (docs/sandbox.md, "Design": a
	// fresh process per program; the sandbox is reused). 1 starts a fresh bubblewrap for every program. Default 256.
	// Without bubblewrap every program gets a fresh harness process.
	ProgramsPerSandbox int
	// UIDBase selects the uids workers run as when spade runs as root: slot
	// i runs as UIDBase+i, so RLIMIT_NPROC is enforced (root is exempt) and
	// a fork bomb in one slot cannot starve another. 0 derives a base from
	// this process's pid (1,000,000 + UIDStride*pid) so concurrent spade
	// processes never share a uid; New then refuses more than UIDStride
	// workers. Negative disables uid switching. Ignored when not root.
	UIDBase int
	// Logger receives the no-isolation warning and slot diagnostics.
	// Default slog.Default().
	Logger *slog.Logger
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Python == "" {
		c.Python = "/usr/bin/python3"
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.LoadTimeout <= 0 {
		c.LoadTimeout = 10 * time.Second
	}
	if c.CPUSeconds <= 0 {
		c.CPUSeconds = 10
	}
	if c.MemoryBytes <= 0 {
		c.MemoryBytes = 512 << 20
	}
	if c.FileSizeBytes <= 0 {
		c.FileSizeBytes = 4 << 20
	}
	if c.TmpfsBytes <= 0 {
		c.TmpfsBytes = 16 << 20
	}
	if c.OpenFiles <= 0 {
		c.OpenFiles = 64
	}
	if c.Processes <= 0 {
		c.Processes = 32
	}
	if c.OutputBytes <= 0 {
		c.OutputBytes = 256 << 10
	}
	if c.ReplyBytes <= 0 {
		c.ReplyBytes = 1 << 20
	}
	if c.ProgramsPerSandbox <= 0 {
		c.ProgramsPerSandbox = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Isolation names how a Sandbox isolates programs.
type Isolation string

// Isolation levels.
const (
	// IsolationBwrap: bubblewrap namespaces plus rlimits.
	IsolationBwrap Isolation = "bwrap"
	// IsolationRlimits: rlimits (and a per-slot uid as root) only; a hostile
	// program can read host files and use the network.
	IsolationRlimits Isolation = "rlimits"
)

// Sandbox starts sandboxed workers, at most Config.Workers at once. It is
// safe for concurrent use. Close it to remove its harness files.
type Sandbox struct {
	cfg        Config
	isolation  Isolation
	bwrap      string
	harnessDir string // host directory holding spade_harness.py and spade_env/
	uidBase    int    // -1: no uid switching
	limitsArg  string
	zygote     bool // bwrap workers are zygotes serving several programs
	// The free slots: warm those whose idle zygote runs, cold those
	// without a sandbox (takeSlot prefers warm ones).
	warm, cold chan int
	// idle[slot] is the slot's running zygote while no program holds the
	// slot; only the slot's holder touches it.
	idle []*worker

	mu     sync.Mutex
	closed bool
}

// UIDStride is how many slot uids each spade process owns when they are
// derived from its pid (Config.UIDBase 0): process p uses 1,000,000 +
// UIDStride*p onwards, so two processes never share a uid as long as each
// has at most UIDStride workers. With Linux's largest pid_max (2^22) the
// uids stay below 2^31.
const UIDStride = 512

// reapOnce runs reapOrphans at the first New of this process (as root);
// staleOnce runs removeStaleHarnessDirs at the first New.
var reapOnce, staleOnce sync.Once

// New checks the interpreter and bubblewrap once (by starting a sandbox) and
// returns a Sandbox. Errors: the interpreter is missing or broken;
// ErrNoIsolation when Strict is set and bubblewrap is unusable;
// ErrForeignProc, at once, when /proc is not this process's PID
// namespace's and bubblewrap or slot uids would need it.
func New(cfg Config) (*Sandbox, error) {
	cfg = cfg.withDefaults()
	s := &Sandbox{cfg: cfg, uidBase: -1, warm: make(chan int, cfg.Workers), cold: make(chan int, cfg.Workers), idle: make([]*worker, cfg.Workers)}
	for i := range cfg.Workers {
		s.cold <- i
	}
	if fi, err := os.Stat(cfg.Python); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("sandbox: python interpreter %s is not an executable file (sandbox.python, Config.Python)", cfg.Python)
	}
	if !cfg.NoBwrap {
		s.bwrap = cfg.Bwrap
		if s.bwrap == "" {
			if _, err := os.Stat("/usr/bin/bwrap"); err == nil {
				s.bwrap = "/usr/bin/bwrap"
			} else if p, err := exec.LookPath("bwrap"); err == nil {
				s.bwrap = p
			}
		}
	}
	uidSwitch := os.Geteuid() == 0 && cfg.UIDBase >= 0
	if uidSwitch || s.bwrap != "" {
		// Checked before anything reads /proc or starts bubblewrap: in a
		// PID namespace that kept its parent's /proc, bubblewrap's monitor
		// looks its sandbox up as /proc/PID by this namespace's pid, finds
		// another process or none, and dies, leaving the sandbox waiting
		// for it (the harness never answers: a LoadTimeout that blamed the
		// interpreter); and pids read there name other processes here.
		if why := procProblem("/proc", os.Getpid()); why != "" {
			return nil, fmt.Errorf("%w: %s. The sandbox needs a /proc of its own PID namespace (bubblewrap finds its sandbox there, and spade finds the processes of its slot uids there to kill them); "+
				"mount one: run under `unshare --pid --fork --mount-proc` (not plain --pid --fork), or give the container a PID namespace with its own /proc", ErrForeignProc, why)
		}
	}
	if uidSwitch {
		s.uidBase = cfg.UIDBase
		if s.uidBase == 0 {
			if cfg.Workers > UIDStride {
				return nil, fmt.Errorf("sandbox: %d workers, but at most %d when slot uids are derived from the process id (Config.UIDBase 0): set UIDBase to a range of %d free uids", cfg.Workers, UIDStride, cfg.Workers)
			}
			s.uidBase = derivedUIDBase + UIDStride*os.Getpid()
		}
		reapOnce.Do(func() {
			if pids := reapOrphans(os.Getpid()); len(pids) > 0 {
				cfg.Logger.Warn("sandbox: killed processes left by an earlier spade process that was killed", "pids", pids)
			}
		})
	}
	staleOnce.Do(func() {
		if dirs := removeStaleHarnessDirs(os.TempDir(), os.Getpid()); len(dirs) > 0 {
			cfg.Logger.Info("sandbox: removed harness directories of spade processes that were killed", "dirs", len(dirs))
		}
	})
	dir, err := writeHarness(cfg.Python)
	if err != nil {
		return nil, err
	}
	s.harnessDir = dir

	var probeErr error
	if s.bwrap != "" {
		if prefix := pythonPrefix(cfg.Python); prefix != "" {
			if why := prefixProblem(prefix); why != "" {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("sandbox: interpreter %s: the sandbox would show its installation prefix %s read-only, which %s; "+
					"use /usr/bin/python3 or an interpreter installed in a directory of its own, such as /opt/python3.12/bin/python3", cfg.Python, prefix, why)
			}
		}
		s.isolation = IsolationBwrap
		s.zygote = true
		s.limitsArg = s.limitsJSON()
		probeErr = s.probe()
		if probeErr == nil {
			return s, nil
		}
		if err := s.bwrapRuns(); err == nil {
			// bubblewrap itself works; the harness does not start inside
			// it. Falling back would run untrusted code without isolation
			// because of an interpreter the sandbox cannot see.
			os.RemoveAll(dir)
			return nil, fmt.Errorf("sandbox: bubblewrap works here, but the Python harness does not start inside it with %s: %w "+
				"(the sandbox shows /usr, /bin, /lib*, /etc/ld.so.cache and the interpreter's installation prefix, and no home "+
				"directory or /tmp of the host: use an interpreter installed outside them, such as /usr/bin/python3; a pyenv "+
				"shim is a script that runs one under $HOME)", cfg.Python, probeErr)
		}
	}
	why := "bubblewrap not found"
	switch {
	case cfg.NoBwrap:
		why = "bubblewrap disabled by Config.NoBwrap"
	case probeErr != nil:
		why = "bubblewrap cannot start a sandbox here: " + probeErr.Error()
	}
	if cfg.Strict {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %s", ErrNoIsolation, why)
	}
	s.bwrap = ""
	s.isolation = IsolationRlimits
	s.zygote = false
	s.limitsArg = s.limitsJSON()
	cfg.Logger.Warn("SANDBOX RUNS WITHOUT ISOLATION: untrusted environment code can read host files, "+
		"use the network and signal this user's processes; only rlimits apply. Install bubblewrap or set Strict.",
		"reason", why, "uid_switching", s.uidBase >= 0)
	if err := s.probe(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sandbox: start python harness with %s: %w", cfg.Python, err)
	}
	return s, nil
}

// bwrapRuns runs bubblewrap with the sandbox's own namespaces, binds and
// environment, less the bind of the interpreter's installation prefix, as
// slot 0's uid, around /usr/bin/true instead of the harness: nil when
// bubblewrap can build the sandbox here, so that a failing harness is the
// interpreter's fault. Errors: the exit status with the tail of
// bubblewrap's output, or a LoadTimeout (seconds) overrun.
func (s *Sandbox) bwrapRuns() error {
	argv := s.argv(-1)
	end := slices.Index(argv, "--")
	if end < 0 {
		return fmt.Errorf("no bubblewrap command line")
	}
	argv = argv[:end+1]
	if prefix := pythonPrefix(s.cfg.Python); prefix != "" {
		for i := 0; i+2 < len(argv); i++ {
			if argv[i] == "--ro-bind" && argv[i+1] == prefix && argv[i+2] == prefix {
				argv = slices.Delete(slices.Clone(argv), i, i+3)
				break
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LoadTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(slices.Clone(argv[1:]), "/usr/bin/true")...)
	// A sandbox process orphaned by a dead bubblewrap monitor keeps the
	// output pipe open; without a bound the wait for it never ends.
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = s.childEnv()
	cmd.SysProcAttr = procAttr(s.slotUID(0))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, textcut.Suffix(strings.TrimSpace(string(out)), 512))
	}
	return nil
}

// probe starts and stops one worker to prove the configuration works.
func (s *Sandbox) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LoadTimeout)
	defer cancel()
	slot := <-s.cold
	defer func() { s.putSlot(slot) }()
	w, err := s.startWorker(ctx, slot)
	if err != nil {
		return err
	}
	if w.zygote {
		s.idle[slot] = w // the first Load in this slot uses it
	} else {
		w.close()
	}
	return nil
}

// Isolation reports how programs are isolated.
func (s *Sandbox) Isolation() Isolation { return s.isolation }

// SlotUIDs returns the uids workers run as (one per slot), or nil when
// workers run as the invoking user. Operators use it to audit processes.
func (s *Sandbox) SlotUIDs() []int {
	if s.uidBase < 0 {
		return nil
	}
	uids := make([]int, s.cfg.Workers)
	for i := range uids {
		uids[i] = s.uidBase + i
	}
	return uids
}

// Config returns the effective configuration (defaults filled in).
func (s *Sandbox) Config() Config { return s.cfg }

// Close stops the idle sandboxes and removes the harness files. Programs
// still open keep running until closed (their sandboxes are stopped then);
// Load fails with ErrClosed afterwards.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// Stop the zygotes of the free slots; a slot held by a program stops
	// its sandbox when the program is closed (release sees s.closed).
	var free []int
drain:
	for {
		select {
		case slot := <-s.warm:
			free = append(free, slot)
		case slot := <-s.cold:
			free = append(free, slot)
		default:
			break drain
		}
	}
	var idle []*worker
	for _, slot := range free {
		if w := s.idle[slot]; w != nil {
			idle = append(idle, w)
			s.idle[slot] = nil
		}
	}
	closeWorkers(idle)
	for _, slot := range free {
		s.cold <- slot
	}
	if err := os.RemoveAll(s.harnessDir); err != nil {
		return fmt.Errorf("sandbox: remove harness dir %s: %w", s.harnessDir, err)
	}
	return nil
}

// slotUID is the uid slot runs as, or -1.
func (s *Sandbox) slotUID(slot int) int {
	if s.uidBase < 0 {
		return -1
	}
	return s.uidBase + slot
}

// Load starts a fresh program process for source (forked from the slot's
// zygote, or a fresh sandbox) and loads it: compile, execute the
// module, and discover exactly one environment class (a spade_env.Env
// subclass that no other class of the program derives from; failing that, a
// class with reset and step methods). It blocks while all Config.Workers
// slots are taken. Errors: *Error with KindSyntax, KindNoClass,
// KindException, KindTimeout, ... for the program's faults; ErrClosed.
func (s *Sandbox) Load(ctx context.Context, source string) (*Program, error) {
	return s.LoadClass(ctx, source, "")
}

// LoadClass is Load with the environment class named explicitly (for
// programs defining several candidate classes). An empty name discovers.
// Errors are Load's: ErrClosed once the sandbox is closed; an *Error of
// KindCanceled wrapping ctx.Err() when ctx is done while it waits for a
// slot; the error of starting a sandbox for the slot; the program's fault
// as an *Error (KindNoClass also when the program defines no class of that
// name); KindProtocol for a load reply without metadata. On error the
// slot is released.
func (s *Sandbox) LoadClass(ctx context.Context, source, class string) (*Program, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	slot, err := s.takeSlot(ctx)
	if err != nil {
		return nil, &Error{Kind: KindCanceled, Op: "load", Detail: "waiting for a sandbox slot", Err: err}
	}
	w, err := s.slotWorker(ctx, slot)
	if err != nil {
		s.putSlot(slot)
		return nil, err
	}
	req := map[string]any{"op": "load", "source": source}
	if class != "" {
		req["class"] = class
	}
	r, err := w.call(ctx, "load", req, s.cfg.LoadTimeout)
	if err == nil && !r.OK {
		err = harnessError("load", r)
	}
	if err == nil && r.Meta == nil {
		err = &Error{Kind: KindProtocol, Op: "load", Detail: "load reply carries no metadata"}
	}
	if err != nil {
		s.release(w, slot)
		return nil, err
	}
	return &Program{sb: s, w: w, slot: slot, meta: r.Meta.clean()}, nil
}

// slotWorker returns a worker for slot with a fresh program process ready
// for "load": the slot's idle zygote when it is alive and has served fewer
// than ProgramsPerSandbox programs, else a newly started sandbox.
func (s *Sandbox) slotWorker(ctx context.Context, slot int) (*worker, error) {
	w := s.idle[slot]
	s.idle[slot] = nil
	if w != nil && (w.isKilled() || w.served >= s.cfg.ProgramsPerSandbox) {
		w.close()
		w = nil
	}
	if w != nil {
		if err := w.spawn(ctx); err == nil {
			return w, nil
		}
		// The zygote is gone or refused: replace the whole sandbox.
		w.close()
	}
	w, err := s.startWorker(ctx, slot)
	if err != nil || !w.zygote {
		return w, err
	}
	if err := w.spawn(ctx); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// release ends the program w serves and frees slot: a zygote that is still
// healthy and restores a clean sandbox stays as the slot's idle worker
// (until ProgramsPerSandbox); anything else is killed. It returns whether
// the zygote found processes besides the program's own still running (it
// killed them): the sandbox's init tells, not code in the program's
// process. False when nobody can tell (no bubblewrap, or the sandbox was
// already killed).
func (s *Sandbox) release(w *worker, slot int) (strays bool) {
	clean := false
	if w.zygote && !w.isKilled() {
		clean, strays = w.reap(context.Background())
	}
	if clean && w.served < s.cfg.ProgramsPerSandbox {
		// Keep it and hand the slot back under s.mu, which Close holds
		// while it collects the free slots: either Close sees this slot
		// with its idle zygote and stops it, or this sees Close's flag.
		s.mu.Lock()
		if !s.closed {
			s.idle[slot] = w
			s.putSlot(slot)
			s.mu.Unlock()
			return strays
		}
		s.mu.Unlock()
	}
	// Stopped before the slot is handed back: closing sweeps the slot's
	// uid, which must not reach the next worker started in this slot.
	w.close()
	s.putSlot(slot)
	return strays
}

// takeSlot waits for a free slot, preferring one whose sandbox runs (its
// zygote idle) to one that would have to start a sandbox first: a slot
// starts its sandbox only when every running one is busy, so a stage
// with fewer programs in flight than slots (validate with workers places
// among model.concurrency slots) starts as many sandboxes as it keeps
// busy, not one per program until every slot has one. Errors: ctx.Err().
func (s *Sandbox) takeSlot(ctx context.Context) (int, error) {
	select {
	case slot := <-s.warm:
		return slot, nil
	default:
	}
	select {
	case slot := <-s.warm:
		return slot, nil
	case slot := <-s.cold:
		return slot, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// putSlot hands slot back: warm when its zygote is idle in it, else cold.
// Only the slot's holder calls it.
func (s *Sandbox) putSlot(slot int) {
	if s.idle[slot] != nil {
		s.warm <- slot
	} else {
		s.cold <- slot
	}
}

// harnessError converts an error reply into an *Error.
func harnessError(op string, r *reply) error {
	// The harness bounds detail and traceback and sends only the kinds
	// below, but a program can rewrite it in its own process; a forged
	// reply must not carry a megabyte of text into tables and prompts.
	kind, detail := r.Kind, textcut.Prefix(r.Detail, maxDetailBytes)
	switch {
	case kind == "":
		kind = KindProtocol
	case !harnessKinds[kind]:
		detail = textcut.Prefix(fmt.Sprintf("error reply of unknown kind %q: %s", textcut.Prefix(string(kind), 40), detail), maxDetailBytes)
		kind = KindProtocol
	}
	return &Error{Kind: kind, Op: op, Detail: detail, Traceback: textcut.Suffix(r.Traceback, maxTracebackBytes)}
}

// Bounds of an Error's Detail and Traceback taken from a harness reply.
const (
	maxDetailBytes    = 4000
	maxTracebackBytes = 4000
)

// harnessKinds are the kinds a harness error reply can carry; the others
// are decided by the Go side.
var harnessKinds = map[Kind]bool{
	KindException: true, KindSyntax: true, KindNoClass: true, KindContract: true, KindMemory: true,
	KindRecursion: true, KindFileSize: true, KindExit: true, KindReplyLimit: true, KindProtocol: true, KindSandbox: true,
}

// errClosedProgram is returned for calls on a closed program.
var errClosedProgram = fmt.Errorf("program: %w", ErrClosed)

// outputTail is ": " and the last 300 bytes of a command's output, or "".
func outputTail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return ""
	}
	return ": " + textcut.Suffix(s, 300)
}
