package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Seal is the content of a round's _ROUND.json: each table's content
// digest and the parent round's seal digest, a hash chain whose head is the
// round id (docs/design.md "Round seal").
type Seal struct {
	// FormatVersion is the storage-format version, FormatVersion (1);
	// readers refuse others.
	FormatVersion int `json:"format_version"`
	// Run is the run's name.
	Run string `json:"run"`
	// Round is the sealed round.
	Round int `json:"round"`
	// Parent is the Digest of round Round-1's seal ("" for round 0).
	Parent string `json:"parent"`
	// Tables maps each table of the round to its content digest
	// (Manifest.ContentDigest).
	Tables map[string]string `json:"tables"`
	// Manifests maps each table to its manifest key.
	Manifests map[string]string `json:"manifests"`
	// CreatedAt is when the seal was written (UTC; an observation, outside
	// Digest).
	CreatedAt time.Time `json:"created_at"`
}

// Digest is the round id: sha256 over the parent digest and the sorted
// table digests (CreatedAt excluded).
func (s *Seal) Digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", s.Parent)
	for _, k := range sortedKeys(s.Tables) {
		fmt.Fprintf(h, "%s %s\n", k, s.Tables[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ReadSeal reads round r's seal; ErrNotCommitted when absent.
func ReadSeal(ctx context.Context, s storage.Store, run string, r int) (*Seal, error) {
	key := SealKey(run, r)
	data, err := storage.ReadAll(ctx, s, key)
	if isNotFound(err) {
		return nil, fmt.Errorf("round %d of run %s: %w", r, run, ErrNotCommitted)
	}
	if err != nil {
		return nil, err
	}
	var seal Seal
	if err := json.Unmarshal(data, &seal); err != nil {
		return nil, fmt.Errorf("%s: malformed JSON: %w", key, err)
	}
	if seal.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%s: %w %d", key, ErrUnknownVersion, seal.FormatVersion)
	}
	return &seal, nil
}

// NextRound returns the first round >= 1 without a seal (round 0 is not
// looked at; a gap in the sealed rounds stops the search there). Errors
// are ReadSeal's for a seal that exists: the store's error unwrapped
// (ctx.Err() included), malformed JSON naming the key, or
// ErrUnknownVersion.
func NextRound(ctx context.Context, s storage.Store, run string) (int, error) {
	for r := 1; ; r++ {
		_, err := ReadSeal(ctx, s, run, r)
		if errors.Is(err, ErrNotCommitted) {
			return r, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// Seal writes round r's _ROUND.json once every stage that runs at r has
// committed its tables (put-if-absent; an existing seal is returned). It
// is what `spade commit --seal` does at the end of a round run stage by
// stage (Airflow, Kubernetes, Slurm), so before writing it checks what the
// seal chains onto, as RunRound does: the run is not an interrupted fork
// (ErrIncompleteFork), round r-1 is sealed (an error wrapping
// ErrNotCommitted that names the command sealing it) and rounds 0..r-1
// verify (VerifyChain, ErrIntegrity).
func (r *Runner) Seal(ctx context.Context, round int) (*Seal, error) {
	defer r.endWrite()
	if err := r.checkRun(ctx); err != nil {
		return nil, err
	}
	if seal, err := ReadSeal(ctx, r.Store, r.Run, round); err == nil {
		return seal, nil
	}
	if err := r.checkBase(ctx, round); err != nil {
		return nil, err
	}
	return r.seal(ctx, round)
}

// seal is Seal without the checks of earlier rounds.
func (r *Runner) seal(ctx context.Context, round int) (*Seal, error) {
	if seal, err := ReadSeal(ctx, r.Store, r.Run, round); err == nil {
		return seal, nil
	}
	ri := NewRoundInfo(r.Run, round, &r.Config)
	seal := &Seal{FormatVersion: FormatVersion, Run: r.Run, Round: round, Tables: map[string]string{}, Manifests: map[string]string{}, CreatedAt: r.now()}
	if round > 0 {
		parent, err := ReadSeal(ctx, r.Store, r.Run, round-1)
		if err == nil {
			seal.Parent = parent.Digest()
		} else {
			return nil, err
		}
	}
	plan, err := r.plan(ri)
	if err != nil {
		return nil, fmt.Errorf("seal round %d: %w", round, err)
	}
	for _, ps := range plan.Running() {
		s := ps.Stage
		for _, o := range s.Outputs() {
			key := ManifestKey(r.Run, round, o.Table)
			m, err := ReadManifest(ctx, r.Store, key)
			if isNotFound(err) {
				// spade commit --seal before the last stage: say which
				// stage is missing, not only which object was not found.
				return nil, fmt.Errorf("seal round %d: stage %s of round %d is not committed (table %s); every stage of the round must be committed before the seal: %w", round, s.Name(), round, o.Table, err)
			}
			if err != nil {
				return nil, fmt.Errorf("seal round %d: %w", round, err)
			}
			seal.Tables[o.Table] = m.ContentDigest()
			seal.Manifests[o.Table] = key
		}
	}
	b, _ := json.MarshalIndent(seal, "", "  ")
	if err := r.fence(ctx, SealKey(r.Run, round)); err != nil {
		return nil, err
	}
	if err := r.claimRun(ctx); err != nil {
		return nil, err
	}
	if err := storage.PutBytesIfAbsent(ctx, r.Store, SealKey(r.Run, round), append(b, '\n')); err != nil && !isExists(err) {
		return nil, fmt.Errorf("seal round %d: %w", round, err)
	}
	if err := r.cleanPending(ctx, round); err != nil {
		r.log().Warn("could not remove part records", "round", round, "err", err)
	}
	return ReadSeal(ctx, r.Store, r.Run, round)
}

// cleanPending removes the part records of a sealed round (they are only
// needed to resume or commit an unsealed one).
func (r *Runner) cleanPending(ctx context.Context, round int) error {
	infos, err := r.Store.List(ctx, RoundDir(r.Run, round)+"/_pending/")
	if err != nil {
		return err
	}
	for _, in := range infos {
		if err := r.Store.Delete(ctx, in.Key); err != nil && !isNotFound(err) {
			return err
		}
	}
	return nil
}
