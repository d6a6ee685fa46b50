package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Kinds of checkpoint files gc removes by a retention rule (never as
// unreferenced garbage: checkpoint files are listed by the checkpoints
// table of a sealed round, and removing them is a decision, recorded in
// the round's removal marker, pipeline.CheckpointRemoval).
const (
	// KindWeights is a servable checkpoint file (outside optimizer/) of a
	// round that Options.KeepCheckpoints does not keep.
	KindWeights Kind = "weights"
	// KindOptimizer is an optimizer-state file (optimizer/) of a round
	// older than the run's last grpo.keep_optimizer_rounds rounds with
	// optimizer state, or of a round whose weights are removed.
	KindOptimizer Kind = "optimizer"
)

// KeepRule is a --keep-checkpoints retention rule: the rounds whose
// checkpoint weights stay. Terms, comma-separated, each keeping more:
// "last:K" the K newest rounds with weights, "every:M" the rounds that
// are multiples of M, "all" every round. Whatever the rule, gc never
// removes a checkpoint that a round still needs (Collect).
type KeepRule struct {
	// Last is K of "last:K"; 0 when absent.
	Last int
	// Every is M of "every:M"; 0 when absent.
	Every int
	// All is true for "all".
	All bool
	// Text is the rule as given.
	Text string
}

// ParseKeepRule parses a --keep-checkpoints rule (see KeepRule). Errors:
// an empty rule, an unknown term, a count that is not a positive integer,
// a term given twice; each names the term.
func ParseKeepRule(text string) (KeepRule, error) {
	r := KeepRule{Text: text}
	if strings.TrimSpace(text) == "" {
		return r, fmt.Errorf("--keep-checkpoints: empty rule (want last:K, every:M or all, comma-separated)")
	}
	seen := map[string]bool{}
	for _, term := range strings.Split(text, ",") {
		term = strings.TrimSpace(term)
		name, arg, hasArg := strings.Cut(term, ":")
		if seen[name] {
			return r, fmt.Errorf("--keep-checkpoints %q: term %q given twice", text, name)
		}
		seen[name] = true
		switch name {
		case "all":
			if hasArg {
				return r, fmt.Errorf("--keep-checkpoints %q: %q takes no count", text, term)
			}
			r.All = true
		case "last", "every":
			n, err := strconv.Atoi(arg)
			if !hasArg || err != nil || n < 1 || strings.HasPrefix(arg, "0") || strings.HasPrefix(arg, "+") {
				return r, fmt.Errorf("--keep-checkpoints %q: %q wants a positive integer count, e.g. %s:3", text, term, name)
			}
			if name == "last" {
				r.Last = n
			} else {
				r.Every = n
			}
		default:
			return r, fmt.Errorf("--keep-checkpoints %q: unknown term %q (want last:K, every:M or all)", text, term)
		}
	}
	return r, nil
}

// keeps reports whether the rule keeps round r's weights; newest is the
// rank of r among the run's rounds with weights, 0 for the newest.
func (r KeepRule) keeps(round, newest int) bool {
	return r.All || newest < r.Last || (r.Every > 0 && round%r.Every == 0)
}

var checkpointFileRe = regexp.MustCompile(`^([^/]+)/round=(\d{6})/checkpoints/files/([^/]+)/(.+)$`)

// ckRound is one round's checkpoint files in a listing.
type ckRound struct {
	round     int
	id        string
	weights   []storage.Info
	optimizer []storage.Info
}

// runFiles holds every run's run file, to find forks; err is set when one
// could not be read, and then no checkpoint file is removed.
type runFiles struct {
	files map[string]*pipeline.RunFile
	err   error
}

// readRunFiles reads the run file of every run listed in all.
func readRunFiles(ctx context.Context, s storage.Store, all []storage.Info) runFiles {
	rf := runFiles{files: map[string]*pipeline.RunFile{}}
	for _, in := range all {
		m := runFileRe.FindStringSubmatch(in.Key)
		if m == nil {
			continue
		}
		f, err := pipeline.ReadRunFile(ctx, s, m[1])
		if err != nil {
			rf.err = fmt.Errorf("run file %s: %w", in.Key, err)
			return rf
		}
		rf.files[m[1]] = f
	}
	return rf
}

// origin is the run whose directory holds round r of run: a fork's rounds
// up to its fork round are its source's (recursively).
func (rf runFiles) origin(run string, r int) string {
	for range 64 { // fork chains are short; a cycle cannot be written
		f := rf.files[run]
		if f == nil || f.ForkOf == "" || r > f.ForkRound {
			return run
		}
		run = f.ForkOf
	}
	return run
}

// forkRounds returns the rounds of run that some fork forked at, each with
// the first such fork's name: the fork's next round trains from and is
// served that round's checkpoint.
func (rf runFiles) forkRounds(run string) map[int]string {
	forks := map[int]string{}
	for name, f := range rf.files {
		if f.ForkOf != "" && rf.origin(f.ForkOf, f.ForkRound) == run {
			if _, ok := forks[f.ForkRound]; !ok || name < forks[f.ForkRound] {
				forks[f.ForkRound] = name
			}
		}
	}
	return forks
}

// checkpointGarbage returns the checkpoint files of run that opts's rule
// (weights) and the run's grpo.keep_optimizer_rounds (optimizer state)
// let gc remove, from listing, and a warning when it removes none because
// a run file could not be read. The files of the run's last sealed round,
// of every later round and of each round a fork forked at are never
// candidates, nor the files those rounds' checkpoints name when they
// carried an earlier round's (a round whose step did not train).
func checkpointGarbage(run string, listing []storage.Info, rf runFiles, opts Options) ([]Object, []string) {
	rounds := map[int]*ckRound{}
	lastSealed := -1
	for _, in := range listing {
		if m := sealRe.FindStringSubmatch(in.Key); m != nil && m[1] == run {
			if r, err := strconv.Atoi(m[2]); err == nil && r > lastSealed {
				lastSealed = r
			}
		}
		m := checkpointFileRe.FindStringSubmatch(in.Key)
		if m == nil || m[1] != run {
			continue
		}
		r, err := strconv.Atoi(m[2])
		if err != nil {
			continue
		}
		c := rounds[r]
		if c == nil {
			c = &ckRound{round: r, id: m[3]}
			rounds[r] = c
		}
		if strings.HasPrefix(m[4], "optimizer/") {
			c.optimizer = append(c.optimizer, in)
		} else {
			c.weights = append(c.weights, in)
		}
	}
	if len(rounds) == 0 {
		return nil, nil
	}
	f := rf.files[run]
	if rf.err != nil || f == nil {
		why := "run has no run file"
		if rf.err != nil {
			why = rf.err.Error()
		}
		return nil, []string{fmt.Sprintf("run %s: no checkpoint file removed (%s)", run, why)}
	}
	// Round r+1 trains from and is served checkpoint r, and a round not
	// sealed may still write or read its own: the last sealed round's
	// checkpoint and every later one stay. A round that did not train
	// carries its parent's checkpoint, whose files lie in the newest
	// round at or before it that has files: that round is what stays.
	holder := func(r int) int {
		best := -1
		for q := range rounds {
			if q <= r && q > best {
				best = q
			}
		}
		return best
	}
	from := lastSealed
	if h := holder(lastSealed); h >= 0 {
		from = h
	}
	forks := map[int]string{}
	for r, name := range rf.forkRounds(run) {
		forks[holder(r)] = name
	}
	keepOpt := f.Config.GRPO.KeepOptimizerRounds
	var order []int
	for r := range rounds {
		order = append(order, r)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(order)))
	var out []Object
	add := func(infos []storage.Info, kind Kind, why string) {
		for _, in := range infos {
			out = append(out, Object{Key: in.Key, Kind: kind, Bytes: in.Size, ModTime: in.ModTime, Why: why})
		}
	}
	withWeights, withOpt := 0, 0
	for _, r := range order {
		c := rounds[r]
		wRank, oRank := withWeights, withOpt
		if len(c.weights) > 0 {
			withWeights++
		}
		if len(c.optimizer) > 0 {
			withOpt++
		}
		if r >= from {
			continue // the last sealed round's or a later one's: the next round's input
		}
		if _, ok := forks[r]; ok {
			continue
		}
		removeWeights := opts.KeepCheckpoints != nil && len(c.weights) > 0 && !opts.KeepCheckpoints.keeps(r, wRank)
		if removeWeights {
			add(c.weights, KindWeights, fmt.Sprintf("checkpoint %s of round %d: not kept by --keep-checkpoints %s (round %d is sealed and no fork forks here)", c.id, r, opts.KeepCheckpoints.Text, r+1))
		}
		switch {
		case len(c.optimizer) == 0:
		case removeWeights:
			add(c.optimizer, KindOptimizer, fmt.Sprintf("optimizer state of checkpoint %s of round %d: its weights are removed", c.id, r))
		case oRank >= keepOpt:
			add(c.optimizer, KindOptimizer, fmt.Sprintf("optimizer state of checkpoint %s of round %d: older than the run's last grpo.keep_optimizer_rounds = %d rounds with optimizer state", c.id, r, keepOpt))
		}
	}
	return out, nil
}

// writeRemovalMarkers writes, before any of them is deleted, the removal
// marker of each round whose checkpoint files in g are to be deleted (not
// WithinGrace), merged with the marker already there. Errors: the
// store's, and an unreadable marker (nothing is then deleted).
func writeRemovalMarkers(ctx context.Context, s storage.Store, g []Object, opts Options, keepOpt func(string) string) error {
	type pending struct {
		id, run    string
		keys       []string
		w, o       bool
		wRule, opt string
	}
	byKey := map[string]*pending{}
	for _, o := range g {
		if o.WithinGrace || (o.Kind != KindWeights && o.Kind != KindOptimizer) {
			continue
		}
		mk := pipeline.RemovalKey(o.Key)
		m := checkpointFileRe.FindStringSubmatch(o.Key)
		if mk == "" || m == nil {
			return fmt.Errorf("gc: %s is not a checkpoint file key", o.Key)
		}
		p := byKey[mk]
		if p == nil {
			p = &pending{id: m[3], run: m[1]}
			byKey[mk] = p
		}
		p.keys = append(p.keys, o.Key)
		if o.Kind == KindWeights {
			p.w = true
			p.wRule = opts.KeepCheckpoints.Text
		} else {
			p.o = true
		}
	}
	for _, p := range byKey {
		p.opt = keepOpt(p.run)
		if p.w {
			p.opt = "--keep-checkpoints " + p.wRule + " (its weights removed)"
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	now := opts.Now().UTC().Format(time.RFC3339)
	for _, mk := range keys {
		p := byKey[mk]
		m, err := pipeline.ReadRemoval(ctx, s, mk)
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		if m == nil {
			m = &pipeline.CheckpointRemoval{CheckpointID: p.id}
		}
		if p.w {
			m.Weights, m.WeightsRule = true, p.wRule
		}
		if p.o && !m.Optimizer {
			m.Optimizer, m.OptimizerRule = true, p.opt
		}
		m.Time = now
		set := map[string]bool{}
		for _, k := range append(m.Keys, p.keys...) {
			set[k] = true
		}
		m.Keys = m.Keys[:0]
		for k := range set {
			m.Keys = append(m.Keys, k)
		}
		sort.Strings(m.Keys)
		data, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		if err := storage.PutBytes(ctx, s, mk, append(data, '\n')); err != nil {
			return fmt.Errorf("gc: write %s: %w", mk, err)
		}
	}
	return nil
}
