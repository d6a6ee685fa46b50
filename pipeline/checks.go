package pipeline

import (
	"context"
	"errors"
	"fmt"
)

// checkFork refuses a run whose spade fork was interrupted
// (CheckForkComplete); a run not created yet passes.
func (r *Runner) checkFork(ctx context.Context) error {
	rf, err := ReadRunFile(ctx, r.Store, r.Run)
	if errors.Is(err, ErrNotCommitted) {
		return nil
	}
	if err != nil {
		return err
	}
	return CheckForkComplete(ctx, r.Store, r.Run, rf)
}

// checkBase refuses an interrupted fork and, for round >= 1, a round-1
// that is not sealed (needSealed) or rounds 0..round-1 that do not verify
// (VerifyChain).
func (r *Runner) checkBase(ctx context.Context, round int) error {
	if err := r.checkFork(ctx); err != nil {
		return err
	}
	if round >= 1 {
		if err := r.needSealed(ctx, round); err != nil {
			return err
		}
		return r.verifyEarlier(ctx, round)
	}
	return nil
}

// needSealed returns nil when round-1 (round >= 1) is sealed, a
// *notSealedError when its seal does not exist, and ReadSeal's error
// otherwise.
func (r *Runner) needSealed(ctx context.Context, round int) error {
	_, err := ReadSeal(ctx, r.Store, r.Run, round-1)
	if !errors.Is(err, ErrNotCommitted) {
		return err
	}
	e := &notSealedError{run: r.Run, round: round, key: SealKey(r.Run, round-1)}
	if round >= 3 {
		// Rounds before round-1 may be unsealed too: then the way forward
		// starts at the first of them, not at round-1.
		if next, nerr := NextRound(ctx, r.Store, r.Run); nerr == nil && next < round-1 {
			e.first = next
		}
	}
	if plan, perr := r.plan(NewRoundInfo(r.Run, round-1, &r.Config)); perr == nil {
		if running := plan.Running(); len(running) > 0 {
			e.last = running[len(running)-1].Name
		}
	}
	return e
}

// notSealedError says that round-1 has no seal, and how to write one. Its
// stages may all be committed (a round run stage by stage whose final
// `spade commit --seal` was left out), so it says "not sealed", not "not
// committed"; it still matches ErrNotCommitted for errors.Is.
type notSealedError struct {
	run   string
	round int    // the round that needs round-1
	key   string // round-1's seal
	last  string // the last stage of round-1 in run order; "" if unknown
	first int    // the run's first unsealed round when it is before round-1, else 0
}

// Error names the round, the unsealed round before it and the command
// that seals it (or the first unsealed round to run from).
func (e *notSealedError) Error() string {
	if e.first > 0 {
		last := ""
		if e.first > 1 {
			last = fmt.Sprintf(" (round %d is the run's last sealed round)", e.first-1)
		}
		return fmt.Sprintf("round %d needs round %d of run %s sealed, and it is not sealed (no %s); neither are the rounds before it from round %d on%s: run them in order first, starting with `spade round %d` (or `spade round next`, once a round)",
			e.round, e.round-1, e.run, e.key, e.first, last, e.first)
	}
	stage := e.last
	if stage == "" {
		stage = "<its last stage>"
	}
	msg := fmt.Sprintf("round %d needs round %d of run %s sealed, and it is not sealed (no %s): once every stage of round %d is committed, seal it with `spade commit --round %d --stage %s --seal`",
		e.round, e.round-1, e.run, e.key, e.round-1, e.round-1, stage)
	if e.round >= 2 {
		msg += fmt.Sprintf(", or run `spade round %d`, which runs what is left of it and seals it", e.round-1)
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrNotCommitted) true.
func (e *notSealedError) Unwrap() error { return ErrNotCommitted }

// verifyEarlier runs VerifyChain over rounds 0..round-1 (round >= 1).
func (r *Runner) verifyEarlier(ctx context.Context, round int) error {
	if err := VerifyChain(ctx, r.Store, r.Run, round-1); err != nil {
		return fmt.Errorf("round %d cannot build on rounds 0..%d of run %s: %w", round, round-1, r.Run, err)
	}
	return nil
}
