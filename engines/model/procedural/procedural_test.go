package procedural

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spade-pipeline/spade/engines/model"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/golden")

func designRequest(t testing.TB, skill, kind, slot string, docs []Document, memory []MemoryEntry, attempt int, feedback string) model.Request {
	t.Helper()
	d, err := json.Marshal(docs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := json.Marshal(memory)
	if err != nil {
		t.Fatal(err)
	}
	setting := "game"
	if kind == "tooluse" {
		setting = "tool_use"
	}
	return model.Request{
		Messages: []model.Message{{Role: model.RoleSystem, Content: "Design an environment."}, {Role: model.RoleUser, Content: "Documents: ..."}},
		Seed:     7,
		Meta: map[string]string{
			MetaTask: "design", MetaKind: kind, MetaSkill: skill, MetaSetting: setting, MetaSlot: slot,
			MetaAttempt: fmt.Sprint(attempt), MetaDoc: string(d), MetaMemory: string(m), MetaFeedback: feedback,
		},
	}
}

func chat(t testing.TB, req model.Request) model.Response {
	t.Helper()
	resp, err := New().Chat(context.Background(), req)
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	return resp
}

// extractSource takes the fenced Python out of a design response, as the
// design stage does.
func extractSource(t testing.TB, resp string) string {
	t.Helper()
	_, rest, ok := strings.Cut(resp, "```python\n")
	if !ok {
		t.Fatalf("no python fence in %q", resp[:min(80, len(resp))])
	}
	src, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("unterminated fence")
	}
	return src
}

func TestChatDeterministic(t *testing.T) {
	docs := loadDocs(t)
	agentReq := model.Request{
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "Play.\nHint: The count always lies between 10 and 20."},
			{Role: model.RoleUser, Content: "Find it. You have 5 guesses.\nValid actions: guess <integer> (1 to 100)"},
		},
		Seed: 42, N: 3, Meta: map[string]string{MetaTask: "agent"},
	}
	reqs := map[string]model.Request{
		"design":  designRequest(t, "planning", "grounded", "r1-s04", docs[:2], nil, 0, ""),
		"tooluse": designRequest(t, "causal_inference", "tooluse", "r1-s05", docs[1:2], nil, 0, ""),
		"agent":   agentReq,
	}
	src := extractSource(t, chat(t, reqs["design"]).Choices[0].Message.Content)
	reqs["hint"] = model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: src}}, Meta: map[string]string{MetaTask: "hint"}}
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) {
			want, _ := json.Marshal(chat(t, req))
			var wg sync.WaitGroup
			got := make([][]byte, 8)
			for i := range got {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := New().Chat(context.Background(), req)
					if err != nil {
						t.Error(err)
						return
					}
					got[i], _ = json.Marshal(resp)
				}()
			}
			wg.Wait()
			for i, g := range got {
				if !bytes.Equal(g, want) {
					t.Fatalf("call %d differs:\n%s\nvs\n%s", i, g, want)
				}
			}
		})
	}
	// The N agent samples draw their own noise but each is reproducible.
	if r := chat(t, agentReq); len(r.Choices) != 3 {
		t.Fatalf("N=3 gave %d choices", len(r.Choices))
	}
}

// TestEveryFamilyCompiles renders every family at every difficulty on every
// test document and parses the sources with the system Python's ast.
func TestEveryFamilyCompiles(t *testing.T) {
	needPython(t, false)
	docs := loadDocs(t)
	type item struct {
		Label, Source string
	}
	var items []item
	for _, fam := range families {
		for diff := 1; diff <= MaxDifficulty; diff++ {
			for di := range docs {
				spec := designSpec{kind: "game", skill: fam.skill, slot: "s1", docs: docs[di : di+1]}
				if fam.toolUse {
					spec.kind, spec.skill = "tooluse", "planning"
				}
				d, err := renderFamily(spec, fam, diff, 0, false)
				if err != nil {
					t.Fatalf("%s/%d/%s: %v", fam.name, diff, docs[di].DocID, err)
				}
				label := fmt.Sprintf("%s/d%d/%s", fam.name, diff, docs[di].DocID)
				if !strings.Contains(d.source, "procedural:v1") || !strings.Contains(d.source, "stand-in for an LLM") {
					t.Errorf("%s: source lacks the stand-in label", label)
				}
				if f, df, ok := FamilyOf(d.source); !ok || f != fam.name || df != diff {
					t.Errorf("%s: FamilyOf = %q, %d, %v", label, f, df, ok)
				}
				if src := extractSource(t, d.response); src != d.source {
					t.Errorf("%s: response fence does not hold the source", label)
				}
				items = append(items, item{label, d.source})
			}
		}
	}
	payload, _ := json.Marshal(items)
	script := `import ast, json, sys
bad = []
for it in json.load(sys.stdin):
    try:
        compile(ast.parse(it["Source"]), it["Label"], "exec")
    except SyntaxError as e:
        bad.append("%s: %s" % (it["Label"], e))
print("\n".join(bad))
sys.exit(1 if bad else 0)`
	cmd := exec.Command(systemPython, "-c", script)
	cmd.Stdin = bytes.NewReader(payload)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ast.parse failed: %v\n%s", err, out)
	}
	t.Logf("%d sources parse", len(items))
}

// TestDocumentTerms checks the grounding: salient document terms appear in
// the environment, the document title never does.
func TestDocumentTerms(t *testing.T) {
	docs := loadDocs(t)
	for _, doc := range docs {
		terms := ExtractTerms([]Document{doc}, 16)
		for _, fam := range families {
			t.Run(doc.DocID+"/"+fam.name, func(t *testing.T) {
				spec := designSpec{kind: "grounded", skill: fam.skill, slot: "s3", docs: []Document{doc}}
				if fam.toolUse {
					spec.kind, spec.skill = "tooluse", "planning"
				}
				d, err := renderFamily(spec, fam, 3, 0, false)
				if err != nil {
					t.Fatal(err)
				}
				found := 0
				for _, n := range terms.Names[:6] {
					if strings.Contains(d.source, n) {
						found++
					}
				}
				if found < 2 {
					t.Errorf("only %d of the document's top terms %v appear", found, terms.Names[:6])
				}
				if mentionsTitle(d.source, []Document{doc}) || mentionsTitle(d.response, []Document{doc}) {
					t.Errorf("title %q appears in the design", doc.Title)
				}
			})
		}
	}
}

func TestTitleNeverLeaks(t *testing.T) {
	// A title made of the document's most salient words must still not be
	// spelled out.
	doc := Document{DocID: "x", Title: "Kinase Cascade", Domain: "biology",
		Text: "The Kinase Cascade amplifies signals. Kinase Cascade steps: Kinase activates Cascade, Kinase again, Cascade again, Kinase Cascade."}
	for _, fam := range families {
		spec := designSpec{kind: "grounded", skill: fam.skill, slot: "s1", docs: []Document{doc}}
		if fam.toolUse {
			spec.kind, spec.skill = "tooluse", "planning"
		}
		spec.skill = fam.skill
		if fam.toolUse {
			spec.skill = "planning"
		}
		for _, slot := range []string{"a0", "a1", "a2"} {
			spec.slot = slot
			d, err := designEnv(spec, 0)
			if err != nil {
				t.Fatalf("%s: %v", fam.name, err)
			}
			if mentionsTitle(d.source, []Document{doc}) {
				t.Fatalf("%s: title leaked", fam.name)
			}
		}
	}
}

func TestChooseDifficulty(t *testing.T) {
	mem := func(fam string, d int, win float64) MemoryEntry {
		return MemoryEntry{EnvID: "e", Family: fam, Skill: "planning", Difficulty: d, WinRate: win}
	}
	tests := []struct {
		name   string
		memory []MemoryEntry
		want   int
	}{
		{"no memory", nil, DefaultDifficulty},
		{"too easy", []MemoryEntry{mem("river_crossing", 3, 0.9)}, 4},
		{"too hard", []MemoryEntry{mem("river_crossing", 3, 0.1)}, 2},
		{"in band", []MemoryEntry{mem("river_crossing", 2, 0.5)}, 2},
		{"other family ignored", []MemoryEntry{mem("resource_schedule", 1, 0.0)}, DefaultDifficulty},
		{"newest wins", []MemoryEntry{mem("river_crossing", 1, 0.0), mem("river_crossing", 4, 0.5)}, 4},
		{"clamped high", []MemoryEntry{mem("river_crossing", 5, 1.0)}, 5},
		{"clamped low", []MemoryEntry{mem("river_crossing", 1, 0.0)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := chooseDifficulty("river_crossing", tc.memory); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDesignCyclesAndAdapts(t *testing.T) {
	docs := loadDocs(t)
	for _, skill := range Skills {
		seen := map[string]bool{}
		for slot := 0; slot < 4; slot++ {
			src := extractSource(t, chat(t, designRequest(t, skill, "game", fmt.Sprintf("r2-s%02d", slot), docs[:1], nil, 0, "")).Choices[0].Message.Content)
			f, d, ok := FamilyOf(src)
			if !ok || d != DefaultDifficulty {
				t.Fatalf("%s slot %d: family %q difficulty %d", skill, slot, f, d)
			}
			seen[f] = true
		}
		if len(seen) < 2 {
			t.Errorf("%s: slots cycle through %v only", skill, seen)
		}
	}
	tools := map[string]bool{}
	for slot := 0; slot < 3; slot++ {
		src := extractSource(t, chat(t, designRequest(t, "planning", "tooluse", fmt.Sprintf("s%d", slot), docs[1:2], nil, 0, "")).Choices[0].Message.Content)
		f, _, _ := FamilyOf(src)
		tools[f] = true
	}
	if len(tools) != 3 {
		t.Errorf("tool-use slots give %v, want the 3 workflows", tools)
	}
	// Memory moves difficulty; a failed attempt with feedback simplifies.
	req := designRequest(t, "quantitative_reasoning", "game", "s0", docs[:1],
		[]MemoryEntry{{Family: "bracket_quantity", Difficulty: 4, WinRate: 0.95}}, 0, "")
	if _, d, _ := FamilyOf(extractSource(t, chat(t, req).Choices[0].Message.Content)); d != 5 {
		t.Errorf("win rate 0.95 at level 4: got level %d, want 5", d)
	}
	req = designRequest(t, "quantitative_reasoning", "game", "s0", docs[:1], nil, 1, "reset raised ValueError")
	if _, d, _ := FamilyOf(extractSource(t, chat(t, req).Choices[0].Message.Content)); d != DefaultDifficulty-1 {
		t.Errorf("retry after failure: got level %d, want %d", d, DefaultDifficulty-1)
	}
}

func TestWriteHint(t *testing.T) {
	docs := loadDocs(t)
	for _, fam := range families {
		spec := designSpec{kind: "game", skill: fam.skill, slot: "s", docs: docs[:1]}
		if fam.toolUse {
			spec.kind, spec.skill = "tooluse", "planning"
		}
		for diff := 1; diff <= MaxDifficulty; diff++ {
			d, err := renderFamily(spec, fam, diff, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			if h := WriteHint(d.source); h == GenericHint || h == "" {
				t.Errorf("%s/%d: generic hint for own source", fam.name, diff)
			}
		}
	}
	for name, src := range map[string]string{
		"foreign":   "from spade_env import Env\nclass X(Env):\n    pass\n",
		"malformed": "SPADE_PROCEDURAL = {\"family\": \"fog_maze\", \"version\": 1\n",
		"unknown":   `SPADE_PROCEDURAL = {"family": "nope", "difficulty": 1, "version": 1, "params": {}}`,
		"missing":   `SPADE_PROCEDURAL = {"family": "fog_maze", "difficulty": 1, "version": 1, "params": {"plan": 3}}`,
		"empty":     "",
	} {
		if h := WriteHint(src); h != GenericHint {
			t.Errorf("%s: hint %q, want the generic hint", name, h)
		}
	}
}

func TestChatErrors(t *testing.T) {
	docs := loadDocs(t)
	good := designRequest(t, "planning", "game", "s1", docs[:1], nil, 0, "")
	tests := []struct {
		name string
		edit func(m map[string]string)
	}{
		{"unknown task", func(m map[string]string) { m[MetaTask] = "summarise" }},
		{"unknown skill", func(m map[string]string) { m[MetaSkill] = "juggling" }},
		{"unknown kind", func(m map[string]string) { m[MetaKind] = "poem" }},
		{"bad doc json", func(m map[string]string) { m[MetaDoc] = "[{" }},
		{"bad memory json", func(m map[string]string) { m[MetaMemory] = "{}" }},
		{"bad attempt", func(m map[string]string) { m[MetaAttempt] = "two" }},
		{"bad agent seed", func(m map[string]string) { m[MetaTask] = "agent"; m[MetaSeed] = "x" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := good
			req.Meta = map[string]string{}
			for k, v := range good.Meta {
				req.Meta[k] = v
			}
			tc.edit(req.Meta)
			_, err := New().Chat(context.Background(), req)
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New().Chat(ctx, good); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", err)
	}
	if New().Name() != "procedural:v1" {
		t.Fatal("name")
	}
}

// TestToolUseContract runs the validator's tool-use checks on every
// workflow: no criterion holds right after reset (reset gate) and the
// reference solution completes every instruction (impossibility screening).
func TestToolUseContract(t *testing.T) {
	needPython(t, true)
	docs := loadDocs(t)
	for _, fam := range familiesFor("", true) {
		for diff := 1; diff <= MaxDifficulty; diff++ {
			t.Run(fmt.Sprintf("%s/%d", fam.name, diff), func(t *testing.T) {
				spec := designSpec{kind: "tooluse", skill: "planning", slot: "s", docs: docs[diff%3 : diff%3+1]}
				d, err := renderFamily(spec, fam, diff, 0, false)
				if err != nil {
					t.Fatal(err)
				}
				drv := startDriver(t, d.source)
				for seed := 0; seed < 4; seed++ {
					r := drv.call(t, map[string]any{"cmd": "reset", "seed": seed})
					for i, c := range r.Criteria {
						if c {
							t.Fatalf("seed %d: criterion %d holds right after reset", seed, i)
						}
					}
					sol := drv.call(t, map[string]any{"cmd": "solution"}).Actions
					var last driverReply
					for _, a := range sol {
						last = drv.call(t, map[string]any{"cmd": "step", "action": a})
					}
					if last.Info["success"] != true || len(sol) > drv.maxTurns {
						t.Fatalf("seed %d: solution of %d actions (max_turns %d) ends with %q", seed, len(sol), drv.maxTurns, last.Obs)
					}
				}
			})
		}
	}
}

// TestGoldenDesign pins the exact design responses of a few requests, so a
// change to templates or parameter draws is a visible diff (-update to
// accept it).
func TestGoldenDesign(t *testing.T) {
	docs := loadDocs(t)
	cases := map[string]model.Request{
		"fog_maze_geo":        designRequest(t, "spatial_reasoning", "game", "s0", docs[2:3], nil, 0, ""),
		"budget_code":         designRequest(t, "quantitative_reasoning", "grounded", "s1", docs[1:2], nil, 0, ""),
		"bank_invoice_bio_d5": designRequest(t, "planning", "tooluse", "s0", docs[:1], []MemoryEntry{{Family: "bank_invoice", Difficulty: 4, WinRate: 1}}, 0, ""),
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			got := chat(t, req).Choices[0].Message.Content
			path := filepath.Join("testdata", "golden", name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Fatalf("design differs from %s (run with -update if intended)", path)
			}
		})
	}
}

func BenchmarkTextAct(b *testing.B) {
	msgs := []model.Message{
		{Role: model.RoleSystem, Content: "Play."},
		{Role: model.RoleUser, Content: "Find the count. You have 8 guesses.\nValid actions: guess <integer> (1 to 500)"},
		{Role: model.RoleAssistant, Content: "guess 250"},
		{Role: model.RoleUser, Content: "Too low: the count is higher than 250.\nValid actions: guess <integer> (1 to 500)"},
	}
	for i := 0; i < b.N; i++ {
		_ = textAct(msgs, "", int64(i), 0)
	}
}
