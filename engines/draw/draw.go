// Package draw chooses what a round works on: which environments of the
// pool a fixed-pool round plays (Pool, PoolSize) and which memory entries
// seed a design prompt (Seeds). Both are pure functions of their inputs
// and the run seed, so every shard draws the same.
package draw

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// PoolSize is the number of pool environments a round plays under
// design.mode fixed_pool: sample.slots (the public fixed-pool launcher's
// --spare-num-games-per-rollout 24, the same flag as SPADE's regeneration
// size), or the whole pool when it holds fewer. It is 0 in design mode
// (every pool environment is played), which keeps the stages' config
// subsets, and so the fingerprints of default runs, as they were. It
// reads design.mode and sample.slots only.
func PoolSize(d config.Design, s config.Sample) int {
	if d.Mode != config.DesignModeFixedPool {
		return 0
	}
	return s.Slots
}

// Pool returns the environments of pool (the pool carried into round
// ri.Round) that the round plays, n being the run's PoolSize. With n 0
// (design mode), and when the pool holds no more than n environments,
// that is all of them, unchanged. Otherwise, with N environments, the
// rounds go
// through the pool in epochs of R = floor(N / n) rounds, without
// replacement inside an epoch (the public launcher's --spare-no-replacement):
// epoch e orders the pool by sha256(seed, e, env_id), and round r, the
// q-th round of its epoch (e = (r-1) / R, q = (r-1) % R), plays
// positions q*n .. q*n+n-1 of that order. The N mod n environments at the
// end of an epoch's order wait for a later epoch. The result keeps the
// pool's order; which environments it holds depends on the seed, the
// round, n and the pool's env_ids only (env_ids are unique in a pool).
func Pool(pool []schemas.PoolEnv, ri pipeline.RoundInfo, n int) []schemas.PoolEnv {
	if n <= 0 || len(pool) <= n {
		return pool
	}
	perEpoch := len(pool) / n
	epoch, q := (ri.Round-1)/perEpoch, (ri.Round-1)%perEpoch
	type keyed struct {
		key string
		env schemas.PoolEnv
	}
	ks := make([]keyed, len(pool))
	for i, p := range pool {
		ks[i] = keyed{drawKey(ri.Seed, epoch, p.EnvID), p}
	}
	sort.Slice(ks, func(a, b int) bool {
		if ks[a].key != ks[b].key {
			return ks[a].key < ks[b].key
		}
		return ks[a].env.EnvID < ks[b].env.EnvID
	})
	picked := make(map[string]bool, n)
	for _, k := range ks[q*n : q*n+n] {
		picked[k.env.EnvID] = true
	}
	out := make([]schemas.PoolEnv, 0, n)
	for _, p := range pool {
		if picked[p.EnvID] {
			out = append(out, p)
		}
	}
	return out
}

// drawKey is the hex sha256 of "pool-draw", the seed and the epoch (as
// 8-byte big-endian integers) and the env_id.
func drawKey(seed int64, epoch int, envID string) string {
	h := sha256.New()
	var b [8]byte
	fmt.Fprint(h, "pool-draw\x00")
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(epoch))
	h.Write(b[:])
	h.Write([]byte(envID))
	return hex.EncodeToString(h.Sum(nil))
}
