package procedural

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/spade-pipeline/spade/stages/model"
)

func TestDebugPlay(t *testing.T) {
	famName := os.Getenv("PD_FAM")
	if famName == "" {
		t.Skip()
	}
	diff, _ := strconv.Atoi(os.Getenv("PD_DIFF"))
	seed, _ := strconv.ParseInt(os.Getenv("PD_SEED"), 10, 64)
	hinted := os.Getenv("PD_HINT") != ""
	fam, _ := familyByName(famName)
	docs := loadDocs(t)
	fi := 0
	for i, f := range families {
		if f.name == famName {
			fi = i
		}
	}
	doc := docs[(fi+diff)%len(docs) : (fi+diff)%len(docs)+1]
	spec := designSpec{kind: "game", skill: fam.skill, setting: "game", slot: "slot-00", docs: doc}
	if fam.toolUse {
		spec.kind, spec.setting, spec.skill = "tooluse", "tool_use", "planning"
	}
	d, _ := renderFamily(spec, fam, diff, 0, false)
	hint := ""
	if hinted {
		hint = WriteHint(d.source)
	}
	t.Logf("HINT: %s", hint)
	drv := startDriver(t, d.source)
	r := drv.call(t, map[string]any{"cmd": "reset", "seed": seed})
	msgs := []model.Message{{Role: model.RoleSystem, Content: "x"}, {Role: model.RoleUser, Content: r.Obs}}
	t.Logf("OBS: %s", r.Obs)
	b := New()
	for turn := 0; turn < drv.maxTurns+1; turn++ {
		resp, _ := b.Chat(context.Background(), model.Request{Messages: msgs, Tools: drv.tools, Seed: seed, Meta: map[string]string{MetaTask: "agent", MetaHint: hint}})
		msg := resp.Choices[0].Message
		action := msg.Content
		if len(msg.ToolCalls) > 0 {
			var args any
			json.Unmarshal([]byte(msg.ToolCalls[0].Arguments), &args)
			a, _ := json.Marshal(map[string]any{"name": msg.ToolCalls[0].Name, "arguments": args})
			action = string(a)
		}
		st := drv.call(t, map[string]any{"cmd": "step", "action": action})
		t.Logf("ACT: %s\nOBS: %s (r=%v)", action, st.Obs, st.Reward)
		msgs = append(msgs, msg)
		if len(msg.ToolCalls) > 0 {
			msgs = append(msgs, model.Message{Role: model.RoleTool, Content: st.Obs})
		} else {
			msgs = append(msgs, model.Message{Role: model.RoleUser, Content: st.Obs})
		}
		if st.Terminated || st.Truncated {
			break
		}
	}
}
