// Package serving puts the round's policy behind an OpenAI-compatible
// server (docs/design.md "The policy of a round, and who serves it",
// docs/serving.md): it materialises a stored checkpoint into a local cache
// (Materialize), starts and stops a serving engine over it for one stage
// (Start, Server.Stop: vLLM, SGLang, transformers serve, llama.cpp), waits
// until the engine serves it under the expected name (WaitReady), keeps
// servers for reuse by the later stages of one process (Pool: one server
// per round under `spade round`), and asks a long-running engine to load
// it (Reload, presets for SGLang and vLLM).
package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM to the server's process
// group before it sends SIGKILL (vLLM and SGLang free GPU memory on
// SIGTERM; 10 s covers their shutdown).
const StopGrace = 10 * time.Second

// Placeholders are the template fields of model.serve_command,
// model.served_model_name and model.reload.body.
type Placeholders struct {
	// Checkpoint is the checkpoint's local directory ({checkpoint}).
	Checkpoint string
	// Port is the server's loopback port ({port}); 0 leaves {port} as is.
	Port int
	// ServedModel is the checkpoint id ({served_model}).
	ServedModel string
}

// Expand replaces {checkpoint}, {port} and {served_model} in s. jsonText
// quotes the values as JSON string contents (for a JSON body template).
func (p Placeholders) Expand(s string, jsonText bool) string {
	q := func(v string) string {
		if !jsonText {
			return v
		}
		b := strconv.Quote(v) // JSON-compatible for the paths and ids used here
		return b[1 : len(b)-1]
	}
	r := []string{"{checkpoint}", q(p.Checkpoint), "{served_model}", q(p.ServedModel)}
	if p.Port > 0 {
		r = append(r, "{port}", strconv.Itoa(p.Port))
	}
	return strings.NewReplacer(r...).Replace(s)
}

// FreePort returns a loopback TCP port that was free a moment ago (the
// kernel's choice for 127.0.0.1:0). Another process may take it before the
// server binds it; WaitReady then fails with the server's exit and log.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Server is a serving engine spade started for one stage, or for the
// stages of a round that share it (Pool): its own process group, killed
// with the group when spade dies (parent-death signal), its output in
// LogPath.
type Server struct {
	// Argv is the expanded command line.
	Argv []string
	// Port is the loopback port it serves on (set by the caller that
	// chose it; Start does not read it).
	Port int
	// LogPath is the file holding its stdout and stderr.
	LogPath string

	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{}
	waitErr error
	once    sync.Once
	stopErr error
}

// Start runs argv (already expanded) as a server in a new process group,
// with SIGKILL as its parent-death signal, stdout and stderr appended to
// logPath (its directory is created), and env added to spade's
// environment. Errors: an empty argv, the log file's, or exec's (a
// program not found), naming the program.
//
// The parent-death signal reaches the direct child when the thread that
// started it ends; Go keeps its threads for the life of the process
// (nothing here locks one), so in practice when spade exits or is killed.
// Engines that fork workers (vLLM, SGLang) end them when their main
// process dies; Stop signals the whole group in any case.
func Start(argv []string, logPath string, env []string) (*Server, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("serve: empty command (model.serve_command)")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("serve: log directory: %w", err)
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("serve: log file: %w", err)
	}
	fmt.Fprintf(lf, "=== spade: %s: %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("serve: start %s: %w", argv[0], err)
	}
	s := &Server{Argv: argv, LogPath: logPath, cmd: cmd, log: lf, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// Pid is the server's process id, which is also its process group id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Exited is closed when the server's main process has exited.
func (s *Server) Exited() <-chan struct{} { return s.done }

// ExitError describes how the server ended, with the last lines of its
// log; call it after Exited is closed.
func (s *Server) ExitError() error {
	return fmt.Errorf("serve: %s exited (%v) before serving; its log %s ends with:\n%s", s.Argv[0], s.waitErr, s.LogPath, Tail(s.LogPath, 20))
}

// Stop ends the server: SIGTERM to its process group, SIGKILL to the group
// after StopGrace (or at once when ctx is done), then it waits for the main
// process and closes the log. Idempotent; returns nil once the server is
// gone, whatever its exit status.
func (s *Server) Stop(ctx context.Context) error {
	s.once.Do(func() {
		pgid := s.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(StopGrace)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
		case <-ctx.Done():
		}
		// The group may hold workers the main process left behind: kill
		// whatever is left of it.
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.stopErr = fmt.Errorf("serve: kill process group %d: %w", pgid, err)
		}
		<-s.done
		s.log.Close()
	})
	return s.stopErr
}

// TailText returns the last n lines of s.
func TailText(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Tail returns the last n lines of the file at path ("" when unreadable),
// at most 8 KiB.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(data) > 8<<10 {
		data = data[len(data)-8<<10:]
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
