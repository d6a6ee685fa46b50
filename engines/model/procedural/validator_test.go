package procedural

import (
	"context"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/engines/sandbox"
)

// TestValidatorAcceptsEveryFamily runs the pipeline's own environment
// validator (engines/envcheck, the full check list of
// docs/environment-contract.md) on every family at every difficulty.
func TestValidatorAcceptsEveryFamily(t *testing.T) {
	needPython(t, true)
	if testing.Short() {
		t.Skip("validates 75 environments in the sandbox")
	}
	sb, err := sandbox.New(sandbox.Config{Workers: 2, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	docs := loadDocs(t)
	n := 0
	for _, fam := range families {
		for diff := 1; diff <= MaxDifficulty; diff++ {
			spec := designSpec{kind: "game", skill: fam.skill, slot: "s1", docs: docs[diff%3 : diff%3+1]}
			if fam.toolUse {
				spec.kind, spec.skill = "tooluse", "planning"
			}
			d, _ := renderFamily(spec, fam, diff, 0, false)
			rep := envcheck.Check(context.Background(), sb, d.source, envcheck.Options{})
			n++
			if !rep.Valid {
				for _, c := range rep.Checks {
					if !c.Passed {
						t.Errorf("%s/%d fails %s: %s %s", fam.name, diff, rep.Reason, c.Detail, c.TracebackTail)
						break
					}
				}
			}
		}
	}
	t.Logf("%d environments pass envcheck", n)
}
