package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RoundResult summarises what RunRound did.
type RoundResult struct {
	// Round is the round asked for.
	Round int `json:"round"`
	// Ran names the stages that ran (all or some of their parts) and
	// committed, in run order.
	Ran []string `json:"ran"`
	// Skipped names the stages whose outputs were already committed with
	// the same fingerprint; stages that do not run this round are in
	// neither list.
	Skipped []string `json:"skipped"`
	// Seal is the round's seal.
	Seal *Seal `json:"seal"`
	// AlreadySealed is true when the round was complete before the call.
	AlreadySealed bool `json:"already_sealed"`
}

// RunRound runs every stage of round r that is not committed yet, commits
// them, and seals the round. A sealed round is left as it is. Before it
// writes anything (the run's _RUN.json included) it checks what round r
// builds on:
//   - a fork whose spade fork was interrupted is refused
//     (ErrIncompleteFork, CheckForkComplete);
//   - round r >= 1 needs round r-1 sealed (otherwise an error that wraps
//     ErrNotCommitted, says "not sealed" and names the command that seals
//     round r-1);
//   - rounds 0..r-1 must verify (VerifyChain: every seal present, parents
//     chained, every listed manifest decoding with the content digest its
//     seal records); a failure wraps ErrIntegrity and names the file.
func (r *Runner) RunRound(ctx context.Context, round int) (*RoundResult, error) {
	if round < 0 {
		return nil, fmt.Errorf("round must be >= 0 (got %d)", round)
	}
	defer r.endWrite()
	if err := r.checkFork(ctx); err != nil {
		return nil, err
	}
	// A config conflict first: it is the answer whatever else is wrong.
	if err := r.checkRun(ctx); err != nil {
		return nil, err
	}
	if round >= 1 {
		if err := r.needSealed(ctx, round); err != nil {
			return nil, err
		}
		if err := r.verifyEarlier(ctx, round); err != nil {
			return nil, err
		}
	}
	res := &RoundResult{Round: round, Ran: []string{}, Skipped: []string{}} // [] not null in JSON
	if seal, err := ReadSeal(ctx, r.Store, r.Run, round); err == nil {
		res.Seal, res.AlreadySealed = seal, true
		return res, nil
	} else if !errors.Is(err, ErrNotCommitted) {
		return nil, err
	}
	ri := NewRoundInfo(r.Run, round, &r.Config)
	plan, err := r.plan(ri)
	if err != nil {
		return nil, err
	}
	for _, ps := range plan.Running() {
		ran, err := r.runStage(ctx, ri, ps.Stage, Shard{Index: 0, Count: 1}, true)
		if err != nil {
			return nil, fmt.Errorf("round %d stage %s: %w", round, ps.Name, err)
		}
		if ran {
			res.Ran = append(res.Ran, ps.Name)
		} else {
			res.Skipped = append(res.Skipped, ps.Name)
		}
	}
	seal, err := r.seal(ctx, round) // rounds 0..round-1 were verified above
	if err != nil {
		return nil, err
	}
	res.Seal = seal
	return res, nil
}

// RunStage runs one stage of round r: the parts of one shard, committing
// the tables when commit is true and every part exists. It is what
// `spade stage NAME --round r [--shard i/n]` does. It returns whether it
// ran (false when the stage was already committed), a *NotInRoundError
// when the stage does not run at that round, or the stage's error. At
// round r >= 1 it needs round r-1 sealed, as RunRound does, and fails
// before any work otherwise (an error wrapping ErrNotCommitted that names
// the command sealing round r-1): a round run stage by stage that forgot
// the previous seal would only find out at its own seal. A stage of a
// sealed round is left as it is (false, nil), as RunRound leaves the round.
func (r *Runner) RunStage(ctx context.Context, round int, name string, shard Shard, commit bool) (bool, error) {
	s, err := r.StageByName(name)
	if err != nil {
		return false, err
	}
	defer r.endWrite()
	ri := NewRoundInfo(r.Run, round, &r.Config)
	if err := r.runsAt(s, ri); err != nil {
		return false, err
	}
	// The chain of earlier rounds is verified once per round, by Seal
	// (`spade commit --seal`), not by every shard task; the previous
	// round's seal is one read, so every task checks that it exists.
	if err := r.checkFork(ctx); err != nil {
		return false, err
	}
	if err := r.checkRun(ctx); err != nil {
		return false, err
	}
	if round >= 1 {
		if err := r.needSealed(ctx, round); err != nil {
			return false, err
		}
	}
	if sealed, err := r.leftSealed(ctx, ri, s); sealed || err != nil {
		return false, err
	}
	return r.runStage(ctx, ri, s, shard, commit)
}

// leftSealed reports whether round ri is sealed, logging that stage s is
// left as it is: as RunRound leaves a sealed round alone, so do RunStage
// and CommitStage. (Round 0 of a run whose corpus was imported holds the
// import's table, which the embedded corpus stage of an Airflow DAG or a
// Kubernetes job would otherwise call a conflict.) Errors: the store's.
func (r *Runner) leftSealed(ctx context.Context, ri RoundInfo, s Stage) (bool, error) {
	_, err := ReadSeal(ctx, r.Store, r.Run, ri.Round)
	if errors.Is(err, ErrNotCommitted) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.log().Info("round already sealed; stage left as it is", "round", ri.Round, "stage", s.Name())
	return true, nil
}

// CommitStage commits a stage whose parts were written by shards; it fails
// naming the missing parts if any is absent, and with a *NotInRoundError
// when the stage does not run at that round. It reports whether this call
// wrote a manifest: false, with a nil error, when the stage's tables were
// already committed with the same fingerprint (before the call, or by a
// concurrent commit, or the round is sealed), as RunStage reports a
// stage that did not run.
func (r *Runner) CommitStage(ctx context.Context, round int, name string) (bool, error) {
	s, err := r.StageByName(name)
	if err != nil {
		return false, err
	}
	defer r.endWrite()
	ri := NewRoundInfo(r.Run, round, &r.Config)
	if err := r.runsAt(s, ri); err != nil {
		return false, err
	}
	if err := r.checkRun(ctx); err != nil {
		return false, err
	}
	if sealed, err := r.leftSealed(ctx, ri, s); sealed || err != nil {
		return false, err
	}
	env, fp, done, err := r.prepare(ctx, ri, s)
	if err != nil || done {
		return false, err
	}
	parts, err := s.Parts(ctx, env)
	if err != nil {
		return false, err
	}
	wrote, err := r.commit(ctx, ri, s, env, fp, parts, time.Duration(0), true)
	return wrote > 0, err
}
