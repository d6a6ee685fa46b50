package pipeline

import (
	"fmt"
	"hash/fnv"
)

// DeriveSeed derives a seed from the run seed and labels, stable across
// platforms and Go versions. Every stored seed of every run derives from
// it (a slot's, a play's, a design attempt's), so its values are pinned
// by TestDeriveSeed (FNV-1a over the labels, mixed with the seed).
func DeriveSeed(runSeed int64, labels ...any) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d", runSeed)
	for _, l := range labels {
		fmt.Fprintf(h, "\x00%v", l)
	}
	return int64(h.Sum64() & (1<<63 - 1))
}
