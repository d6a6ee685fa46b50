package diff

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// TestConfigDiff: the switch an ablation flips is listed with both values;
// operational settings and settings left at their defaults are not, and a
// config pinned before a setting existed (blank) equals its default.
func TestConfigDiff(t *testing.T) {
	a := config.Default()
	b := config.Default()
	b.Ablation.NoMemory = true
	b.Label.DesignerReward = config.DesignerRewardLearningPotential
	b.Workers = 7 // operational
	got := ConfigDiff(a, b)
	want := []Setting{
		{Key: "label.designer_reward", A: `"regret"`, B: `"learning_potential"`},
		{Key: "ablation.no_memory", A: "false", B: "true"},
	}
	if len(got) != len(want) {
		t.Fatalf("ConfigDiff = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("setting %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	old := config.Default()
	old.Label.DesignerReward, old.Label.Blend = "", config.Blend{}
	if d := ConfigDiff(a, old); len(d) != 0 {
		t.Errorf("a blank (older) config differs from the default: %+v", d)
	}
	var buf bytes.Buffer
	rep := &Report{A: "default", B: "nomem", Equal: true, Config: got}
	if err := rep.WriteText(&buf, false); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, line := range []string{"config ablation.no_memory: false -> true\n", "2 settings differ)"} {
		if !strings.Contains(out, line) {
			t.Errorf("text report lacks %q:\n%s", line, out)
		}
	}
}
