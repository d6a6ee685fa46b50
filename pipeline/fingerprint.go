package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// prepare resolves the inputs and fingerprint of s at round ri and reports
// whether all its outputs are committed already with that fingerprint.
func (r *Runner) prepare(ctx context.Context, ri RoundInfo, s Stage) (*Env, string, bool, error) {
	ins, _ := s.Plan(ri, &r.Config)
	env := &Env{Round: ri, Config: &r.Config, Stage: s.Name(), store: r.Store, inputs: map[string]*Manifest{}}
	var refs []InputRef
	for _, in := range ins {
		key := ManifestKey(r.Run, in.Round, in.Table)
		m, err := ReadManifest(ctx, r.Store, key)
		if isNotFound(err) {
			if in.Optional {
				env.inputs[inputKey(in.Table, in.Round)] = nil
				refs = append(refs, InputRef{Table: in.Table, Round: in.Round, Key: key, Digest: "absent"})
				continue
			}
			return nil, "", false, fmt.Errorf("input %s of round %d is not committed (%s)", in.Table, in.Round, key)
		}
		if err != nil {
			return nil, "", false, err
		}
		env.inputs[inputKey(in.Table, in.Round)] = m
		refs = append(refs, InputRef{Table: in.Table, Round: in.Round, Key: key, Digest: m.ContentDigest()})
	}
	fp := r.fingerprint(s, ri, refs)
	env.inputRefs = refs
	done := true
	for _, o := range s.Outputs() {
		m, err := ReadManifest(ctx, r.Store, ManifestKey(r.Run, ri.Round, o.Table))
		if isNotFound(err) {
			done = false
			continue
		}
		if err != nil {
			return nil, "", false, err
		}
		if m.StageFingerprint != fp {
			return env, fp, false, fmt.Errorf("table %s of round %d is committed with stage fingerprint %s, and this invocation computes %s (%s): %w; use a new --run, or spade fork",
				o.Table, ri.Round, short(m.StageFingerprint), short(fp), explainFingerprint(m, refs, r.Config.Digest()), ErrConflict)
		}
	}
	return env, fp, done, nil
}

// explainFingerprint says why the fingerprint of committed manifest m
// differs from the one computed now from refs and the config digest: code
// version, config, changed inputs, or else a stage or schema version.
func explainFingerprint(m *Manifest, refs []InputRef, cfgDigest string) string {
	var why []string
	if m.CodeVersion != CodeVersion() {
		why = append(why, fmt.Sprintf("code version %s -> %s", m.CodeVersion, CodeVersion()))
	}
	if m.ConfigDigest != cfgDigest {
		why = append(why, "config changed")
	}
	have := map[string]string{}
	for _, in := range m.Inputs {
		have[fmt.Sprintf("%s@%d", in.Table, in.Round)] = in.Digest
	}
	for _, in := range refs {
		if d := have[fmt.Sprintf("%s@%d", in.Table, in.Round)]; d != in.Digest {
			why = append(why, fmt.Sprintf("input %s of round %d changed", in.Table, in.Round))
		}
	}
	if len(why) == 0 {
		why = append(why, "stage or schema version changed")
	}
	return strings.Join(why, "; ")
}

// fingerprint is the stage fingerprint of s at round ri with inputs refs:
// the digest (config.DigestOf) of the stage name, round, regeneration
// flag, output tables with their schema fingerprints, the stage's config
// subset of the pinned config, the input content digests, the seed and
// the code version. Changing the hashed struct changes every run's
// fingerprints.
func (r *Runner) fingerprint(s Stage, ri RoundInfo, refs []InputRef) string {
	type outFP struct{ Table, Kind, Schema string }
	var outs []outFP
	for _, o := range s.Outputs() {
		info, _ := schemas.Lookup(o.KindOf())
		outs = append(outs, outFP{o.Table, o.KindOf(), info.Fingerprint()})
	}
	// Operational settings (workers, timeouts, programs per sandbox) never
	// reach a fingerprint: a run resumes with other values (docs/config.md).
	pinned := r.Config.Pinned()
	return config.DigestOf(struct {
		Stage   string
		Round   int
		Regen   bool
		Outputs []outFP
		Config  any
		Inputs  []InputRef
		Seed    int64
		Code    string
	}{s.Name(), ri.Round, ri.Regeneration, outs, s.ConfigSubset(&pinned), refs, ri.Seed, CodeVersion()})
}

// FingerprintOf computes the stage fingerprint s would have at round r now
// (inputs resolved from the store).
func (r *Runner) FingerprintOf(ctx context.Context, s Stage, round int) string {
	_, fp, _, _ := r.prepare(ctx, NewRoundInfo(r.Run, round, &r.Config), s)
	return fp
}
