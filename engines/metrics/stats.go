package metrics

import (
	"fmt"
	"math"
	"slices"
)

// Summary describes a distribution of float values (regret, win rate,
// reward levels, ...) for round-level reporting. All fields are computed
// from the sorted values, so a Summary does not depend on input order.
type Summary struct {
	// N is the number of values summarised.
	N int
	// Mean is the arithmetic mean, summed in ascending order.
	Mean float64
	// Min and Max are the extremes.
	Min, Max float64
	// P10, P50 and P90 are quantiles by linear interpolation between
	// closest ranks (Hyndman & Fan 1996 type 7, NumPy's default): for
	// sorted x and q in [0, 1], h = (N−1)·q and
	// Q(q) = x[⌊h⌋] + (h−⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
	P10, P50, P90 float64
}

// Summarize returns the Summary of xs. Errors: ErrEmpty for no values;
// ErrNonFinite (naming the index) for NaN or ±Inf, which would otherwise
// poison the mean silently.
func Summarize(xs []float64) (Summary, error) {
	if len(xs) == 0 {
		return Summary{}, fmt.Errorf("summarize: %w", ErrEmpty)
	}
	for i, v := range xs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Summary{}, fmt.Errorf("summarize: value %d is %v: %w", i, v, ErrNonFinite)
		}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	return Summary{
		N:    len(s),
		Mean: sum / float64(len(s)),
		Min:  s[0],
		Max:  s[len(s)-1],
		P10:  quantile(s, 0.1),
		P50:  quantile(s, 0.5),
		P90:  quantile(s, 0.9),
	}, nil
}

// quantile is the type-7 quantile of sorted (non-empty) values.
func quantile(sorted []float64, q float64) float64 {
	h := float64(len(sorted)-1) * q
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := h - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// RewardResolution is the granularity at which RewardGranularity tells
// reward values apart: values are rounded to the nearest multiple of it,
// so float noise (0.1+0.2 vs 0.3) does not count as a new level.
const RewardResolution = 1e-6

// RewardGranularity returns the number of distinct reward levels an
// environment emits: distinct per-step rewards across all its plays
// (plays[i] holds play i's step rewards, Rollout.StepRewards), after
// rounding to RewardResolution; +0 and −0 are one level. The SPADE paper
// (app. F) uses it to tell dense, partial-credit environments from binary
// win/lose ones: binary gives 2 (or 1 when every play ends alike).
// An environment with no steps has 0 levels.
//
// Errors: ErrNonFinite naming play and step for NaN or ±Inf rewards.
func RewardGranularity(plays [][]float64) (int, error) {
	levels := map[float64]struct{}{}
	for i, steps := range plays {
		for j, r := range steps {
			if math.IsNaN(r) || math.IsInf(r, 0) {
				return 0, fmt.Errorf("reward granularity: play %d step %d reward %v: %w", i, j, r, ErrNonFinite)
			}
			level := math.Round(r / RewardResolution)
			if level == 0 {
				level = 0 // fold −0 into +0
			}
			levels[level] = struct{}{}
		}
	}
	return len(levels), nil
}

// LearnableLow and LearnableHigh bound the SPADE learnable band of agent
// win rates (docs/method.md step 6, paper sec. 5: [0.2, 0.8]).
const (
	LearnableLow  = 0.2
	LearnableHigh = 0.8
)

// bandSlack widens the learnable band's inclusive bounds by a hair so that
// a win rate computed as 0.1+0.1 (≠ 0.2 in binary) still counts as 0.2.
const bandSlack = 1e-9

// InBand reports whether winRate lies in the inclusive band [lo, hi]
// (with a 1e-9 tolerance for float rounding). NaN is never in the band.
func InBand(winRate, lo, hi float64) bool {
	return winRate >= lo-bandSlack && winRate <= hi+bandSlack
}

// LearnableFraction returns the share of environments whose win rate lies
// in the inclusive band [lo, hi] (normally LearnableLow, LearnableHigh),
// the paper's headline "learnable fraction" (sec. 6: 0.16 → 0.31 over
// training). winRates has one value per environment, each in [0, 1].
//
// Errors: ErrEmpty for no environments; an error for a band outside
// [0, 1] or with lo > hi; ErrNonFinite or a range error naming the index
// for a bad win rate.
func LearnableFraction(winRates []float64, lo, hi float64) (float64, error) {
	if !(lo >= 0 && hi <= 1 && lo <= hi) {
		return 0, fmt.Errorf("learnable fraction: band [%v, %v] is not inside [0, 1] with lo <= hi", lo, hi)
	}
	if len(winRates) == 0 {
		return 0, fmt.Errorf("learnable fraction: %w", ErrEmpty)
	}
	in := 0
	for i, w := range winRates {
		if err := checkRate(w); err != nil {
			return 0, fmt.Errorf("learnable fraction: win rate %d: %w", i, err)
		}
		if InBand(w, lo, hi) {
			in++
		}
	}
	return float64(in) / float64(len(winRates)), nil
}

// PerSkillWinRate returns, for each skill, the mean win rate of its
// environments (paper app. F, per-skill win rates). skills and winRates
// are parallel, one entry per environment. Means are summed in ascending
// order, so the result does not depend on environment order. The map is
// empty for no environments; use SortedKeys to iterate it in a stable
// order.
//
// Errors: a length mismatch; ErrNonFinite or a range error naming the
// index for a win rate outside [0, 1]; an empty skill name.
func PerSkillWinRate(skills []string, winRates []float64) (map[string]float64, error) {
	if len(skills) != len(winRates) {
		return nil, fmt.Errorf("per-skill win rate: %d skills but %d win rates", len(skills), len(winRates))
	}
	bySkill := map[string][]float64{}
	for i, w := range winRates {
		if skills[i] == "" {
			return nil, fmt.Errorf("per-skill win rate: environment %d has an empty skill", i)
		}
		if err := checkRate(w); err != nil {
			return nil, fmt.Errorf("per-skill win rate: environment %d (skill %q): %w", i, skills[i], err)
		}
		bySkill[skills[i]] = append(bySkill[skills[i]], w)
	}
	out := make(map[string]float64, len(bySkill))
	for skill, ws := range bySkill {
		slices.Sort(ws)
		var sum float64
		for _, w := range ws {
			sum += w
		}
		out[skill] = sum / float64(len(ws))
	}
	return out, nil
}

// SortedKeys returns the keys of a string-keyed map in ascending order, the
// order in which reports and tables list skills.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkRate accepts a finite rate in [0, 1].
func checkRate(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) {
		return fmt.Errorf("value %v: %w", w, ErrNonFinite)
	}
	if w < 0 || w > 1 {
		return fmt.Errorf("value %v outside [0, 1]", w)
	}
	return nil
}
