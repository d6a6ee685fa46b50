package procedural

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spade-pipeline/spade/engines/model"
)

const systemPython = "/usr/bin/python3"

// sandboxPythonPath is where the spade_env contract lives in this checkout.
var sandboxPythonPath = filepath.Join("..", "..", "sandbox", "python")

func loadDocs(t testing.TB) []Document {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "docs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []Document
	if err := json.Unmarshal(b, &docs); err != nil {
		t.Fatalf("testdata/docs.json: %v", err)
	}
	return docs
}

func needPython(t testing.TB, withContract bool) {
	t.Helper()
	if _, err := os.Stat(systemPython); err != nil {
		t.Skipf("%s not found", systemPython)
	}
	if withContract {
		if _, err := os.Stat(filepath.Join(sandboxPythonPath, "spade_env", "__init__.py")); err != nil {
			t.Skip("spade_env contract not present in engines/sandbox/python")
		}
	}
}

// envDriver is one Python process running testdata/driver.py for one
// environment source.
type envDriver struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Reader
	maxTurns int
	tools    []model.Tool
}

type driverReply struct {
	Error      string          `json:"error"`
	Obs        string          `json:"obs"`
	Reward     float64         `json:"reward"`
	Terminated bool            `json:"terminated"`
	Truncated  bool            `json:"truncated"`
	Info       map[string]any  `json:"info"`
	MaxTurns   int             `json:"max_turns"`
	Tools      json.RawMessage `json:"tools"`
	Criteria   []bool          `json:"criteria"`
	Actions    []string        `json:"actions"`
}

func startDriver(t testing.TB, source string) *envDriver {
	t.Helper()
	cmd := exec.Command(systemPython, filepath.Join("testdata", "driver.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sandboxPythonPath, "PYTHONHASHSEED=0")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &envDriver{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	t.Cleanup(d.close)
	r := d.call(t, map[string]any{"cmd": "load", "source": source})
	d.maxTurns = r.MaxTurns
	var tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	if len(r.Tools) > 0 {
		if err := json.Unmarshal(r.Tools, &tools); err != nil {
			t.Fatalf("tools: %v", err)
		}
	}
	for _, tl := range tools {
		d.tools = append(d.tools, model.Tool{Name: tl.Name, Description: tl.Description, Parameters: string(tl.Parameters)})
	}
	return d
}

func (d *envDriver) close() {
	_ = d.in.Close()
	_ = d.cmd.Wait()
}

func (d *envDriver) call(t testing.TB, req map[string]any) driverReply {
	t.Helper()
	b, _ := json.Marshal(req)
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("driver write: %v", err)
	}
	line, err := d.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("driver read: %v", err)
	}
	var r driverReply
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("driver reply %q: %v", line, err)
	}
	if r.Error != "" {
		t.Fatalf("driver %v: %s", req["cmd"], r.Error)
	}
	return r
}

// playResult is one rollout.
type playResult struct {
	ret     float64
	success bool
	turns   int
	ended   bool // terminated or truncated by the environment itself
}

// play runs one episode with the procedural agent, the way the rollout
// stage does: observations as user (or tool) messages, the hint in the
// system prompt and in Meta.
func play(t testing.TB, b *Backend, d *envDriver, seed int64, hint string) playResult {
	t.Helper()
	r := d.call(t, map[string]any{"cmd": "reset", "seed": seed})
	sys := "You are an agent in a text environment. Reply with exactly one action."
	if hint != "" {
		sys += "\nHint: " + hint
	}
	msgs := []model.Message{{Role: model.RoleSystem, Content: sys}, {Role: model.RoleUser, Content: r.Obs}}
	var res playResult
	for turn := 0; turn < d.maxTurns+2; turn++ {
		req := model.Request{Messages: msgs, Tools: d.tools, Seed: seed, Temperature: 1,
			Meta: map[string]string{MetaTask: "agent", MetaHint: hint, MetaSeed: strconv.FormatInt(seed, 10)}}
		resp, err := b.Chat(context.Background(), req)
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
		msg := resp.Choices[0].Message
		action := msg.Content
		if len(msg.ToolCalls) > 0 {
			tc := msg.ToolCalls[0]
			var args any
			if err := json.Unmarshal([]byte(tc.Arguments), &args); err != nil {
				t.Fatalf("tool call arguments %q: %v", tc.Arguments, err)
			}
			a, _ := json.Marshal(map[string]any{"name": tc.Name, "arguments": args})
			action = string(a)
		}
		st := d.call(t, map[string]any{"cmd": "step", "action": action})
		res.turns++
		res.ret += st.Reward
		msgs = append(msgs, msg)
		if len(msg.ToolCalls) > 0 {
			msgs = append(msgs, model.Message{Role: model.RoleTool, Content: st.Obs, ToolCallID: msg.ToolCalls[0].ID})
		} else {
			msgs = append(msgs, model.Message{Role: model.RoleUser, Content: st.Obs})
		}
		if st.Terminated || st.Truncated {
			res.ended = true
			res.success = st.Info["success"] == true
			return res
		}
	}
	return res
}

func fmtRate(x float64) string { return fmt.Sprintf("%.2f", x) }
