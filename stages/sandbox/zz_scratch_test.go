package sandbox

import (
	"context"
	"os"
	"strconv"
	"testing"
)

func TestScratchCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SCR_N"))
	progs, _ := strconv.Atoi(os.Getenv("SCR_P"))
	sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
	src := readTestdata(t, "counter.py")
	ctx := context.Background()
	for range progs {
		p, err := sb.Load(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			e, err := p.Reset(ctx, int64(i))
			if err != nil {
				t.Fatal(err)
			}
			e.Step(ctx, "add1")
			e.Close()
		}
		p.Close()
	}
}
