// Package metrics holds the pure functions behind SPADE's round-level
// metrics (SPADE paper sec. 6 and app. F): diversity as a Vendi score over
// TF-IDF + LSA embeddings of environment sources, reward granularity,
// distribution summaries, domain coverage over a fixed list of 13 domains,
// per-skill win rates and the learnable fraction.
//
// Every function here is deterministic: it reads its arguments only, uses
// no wall clock, no global random source and no map iteration order in
// anything it returns. Definitions, and where they differ from the paper,
// are written up in docs/metrics.md.
package metrics

import "errors"

// ErrEmpty is returned by metrics that are undefined over an empty input
// (no texts, no values, no environments). Callers that want to record
// "not measured" instead of failing branch on it with errors.Is.
var ErrEmpty = errors.New("metrics: empty input")

// ErrNonFinite is returned when an input value is NaN or ±Inf; a NaN reward
// must never average silently into a round metric (docs/method.md, known
// weaknesses of the public code).
var ErrNonFinite = errors.New("metrics: non-finite value")
