package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// sideCheck is one side file for Verify to read, with what lists it.
type sideCheck struct {
	f     FileEntry // key, sha256, size; rows and row groups for a recorded Parquet file
	round int
	table string // the checkpoints table that lists a checkpoint file, "" for a recorded file
	// by names what lists the file, for the problem text: "checkpoint X
	// of <manifest key>", "side record <key>".
	by string
	// removal is the key of the gc removal marker to consult when a
	// checkpoint file is missing ("" for a recorded file).
	removal      string
	repair, hint string
}

// sideRoundRe finds the round of a side file from its key.
var sideRoundRe = regexp.MustCompile(`/round=(\d{6})/`)

// sideFiles checks the side files of the run (VerifyReport.SideFiles):
// the checkpoint files listed by the checkpoints tables read (v.ckpts),
// and the files under o.SideDirs against their side records.
func (v *verifier) sideFiles(ctx context.Context, o VerifyOptions) error {
	var checks []sideCheck
	seen := map[string]bool{}
	add := func(c sideCheck) {
		if id := c.f.Key + " " + c.f.SHA256; !seen[id] {
			seen[id] = true
			checks = append(checks, c)
		}
	}
	for _, c := range v.ckpts {
		key := ManifestKey(v.run, c.round, c.m.Table)
		rows, err := ReadManifestRows(ctx, v.s, schemas.Checkpoints, c.m)
		if errors.Is(err, ErrIntegrity) {
			continue // the damaged table file is reported already
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			v.damage(Damage{Key: key, Round: c.round, Table: c.m.Table, Problem: fmt.Sprintf("its rows cannot be read, so the checkpoint files they list are not checked: %v", err), Hint: v.committedHint(c.round, c.sealed)})
			continue
		}
		fork := ""
		if c.round >= 1 {
			fork = fmt.Sprintf(", or branch from an earlier round with `spade fork %s NEW --round R`", v.run)
		}
		hint := fmt.Sprintf("no spade command writes a committed checkpoint's files again: restore it from a copy (%s gives its sha256)%s", key, fork)
		for _, ck := range rows {
			for _, f := range ck.Files {
				add(sideCheck{
					f: FileEntry{Key: f.Key, SHA256: f.SHA256, Bytes: f.Bytes}, round: c.round, table: c.m.Table,
					by: fmt.Sprintf("checkpoint %s of %s", ck.CheckpointID, key), removal: RemovalKey(f.Key), hint: hint,
				})
			}
		}
	}
	for _, dir := range o.SideDirs {
		prefix := v.run + "/" + strings.TrimLeft(dir, "/")
		infos, err := v.s.List(ctx, prefix)
		if err != nil {
			return err
		}
		sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
		keys := map[string]bool{}
		for _, in := range infos {
			keys[in.Key] = true
		}
		for _, in := range infos {
			if fileKey, ok := strings.CutSuffix(in.Key, SideRecordSuffix); ok {
				if err := v.sideRecord(ctx, in.Key, fileKey, o.Round, add); err != nil {
					return err
				}
				continue
			}
			if keys[SideRecordKey(in.Key)] {
				continue // checked through its record
			}
			r := -1
			if m := sideRoundRe.FindStringSubmatch(in.Key); m != nil {
				r, _ = strconv.Atoi(m[1])
			}
			if o.Round >= 0 && r != o.Round {
				continue
			}
			if err := v.unrecorded(ctx, in.Key, r); err != nil {
				return err
			}
		}
	}
	return v.readSide(ctx, checks)
}

// sideRecord reads the side record at rk (of the file at fileKey) and
// queues its file through add, unless the record is of a round other
// than round (when round >= 0). A record that does not decode is damage.
func (v *verifier) sideRecord(ctx context.Context, rk, fileKey string, round int, add func(sideCheck)) error {
	data, err := storage.ReadAll(ctx, v.s, rk)
	if isNotFound(err) {
		return nil // removed since the listing
	}
	if err != nil {
		return err
	}
	rec, err := decodeSideRecord(rk, data)
	if err != nil {
		r := -1
		if m := sideRoundRe.FindStringSubmatch(rk); m != nil {
			r, _ = strconv.Atoi(m[1])
		}
		if round < 0 || r == round {
			v.damage(Damage{Key: rk, Round: r, Problem: err.Error(), Hint: "the record cannot be trusted: remove it and write " + fileKey + " again with the command that wrote it"})
		}
		return nil
	}
	if round >= 0 && rec.Round != round {
		return nil
	}
	hint := ""
	if rec.Repair == "" {
		hint = "no spade command writes it again: restore it from a copy (" + rk + " gives its sha256)"
	}
	add(sideCheck{f: rec.File, round: rec.Round, by: "side record " + rk, repair: rec.Repair, hint: hint})
	return nil
}

// unrecorded handles a side file without a record: a .parquet file that
// does not open is damage; any other is listed in Unrecorded.
func (v *verifier) unrecorded(ctx context.Context, key string, r int) error {
	if strings.HasSuffix(key, ".parquet") {
		data, err := storage.ReadAll(ctx, v.s, key)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, perr := parquet.OpenFile(bytes.NewReader(data), int64(len(data))); perr != nil {
			v.damage(Damage{Key: key, Round: r, Problem: fmt.Sprintf("%s: %v: not a readable Parquet file, and no side record gives its sha256: %v", key, ErrIntegrity, perr), Hint: "write it again with the command that wrote it (for an evaluation, spade eval --round R --force with its settings), or delete it"})
			return nil
		}
	}
	v.mu.Lock()
	v.rep.Unrecorded = append(v.rep.Unrecorded, key)
	v.mu.Unlock()
	return nil
}

// readSide reads every queued side file in full and checks it.
func (v *verifier) readSide(ctx context.Context, checks []sideCheck) error {
	removals := map[string]*CheckpointRemoval{}
	p := pool.New().WithContext(ctx).WithMaxGoroutines(verifyReads).WithCancelOnError().WithFirstError()
	for _, c := range checks {
		p.Go(func(ctx context.Context) error {
			problem, missing, err := checkSide(ctx, v.s, c)
			if err != nil {
				return err
			}
			if missing && c.removal != "" {
				v.mu.Lock()
				m, ok := removals[c.removal]
				v.mu.Unlock()
				if !ok {
					if m, err = ReadRemoval(ctx, v.s, c.removal); err != nil && !errors.Is(err, ErrIntegrity) {
						return err
					}
					v.mu.Lock()
					removals[c.removal] = m
					v.mu.Unlock()
				}
				if m != nil && slices.Contains(m.Keys, c.f.Key) {
					v.mu.Lock()
					v.rep.RemovedByGC = append(v.rep.RemovedByGC, c.f.Key)
					v.mu.Unlock()
					return nil
				}
			}
			v.mu.Lock()
			v.rep.SideFiles++
			v.rep.SideBytes += c.f.Bytes
			v.mu.Unlock()
			if problem != "" {
				v.damage(Damage{Key: c.f.Key, Round: c.round, Table: c.table, Problem: problem, Repair: c.repair, Hint: c.hint})
			}
			return nil
		})
	}
	return p.Wait()
}

// checkSide reads the side file of c and says what is wrong with it
// against c.f ("" when whole): missing, size, sha256, and for a recorded
// Parquet file its footer's row and row group counts. A checkpoint file
// (which may be large) is hashed as a stream. Errors: the store's, other
// than a missing object.
func checkSide(ctx context.Context, s storage.Store, c sideCheck) (problem string, missing bool, err error) {
	if !strings.HasSuffix(c.f.Key, ".parquet") || c.removal != "" {
		return checkBlob(ctx, s, c.f.Key, c.f.SHA256, c.f.Bytes, c.by)
	}
	data, err := storage.ReadAll(ctx, s, c.f.Key)
	if isNotFound(err) {
		return fmt.Sprintf("%s: %v: file missing, but %s lists it", c.f.Key, ErrIntegrity, c.by), true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", c.f.Key, err)
	}
	if int64(len(data)) != c.f.Bytes {
		return fmt.Sprintf("%s: %v: %d bytes, %s says %d", c.f.Key, ErrIntegrity, len(data), c.by, c.f.Bytes), false, nil
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != c.f.SHA256 {
		return fmt.Sprintf("%s: %v: sha256 %s, %s says %s", c.f.Key, ErrIntegrity, short(got), c.by, short(c.f.SHA256)), false, nil
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Sprintf("%s: %v: its sha256 matches %s, but it is not a readable Parquet file: %v", c.f.Key, ErrIntegrity, c.by, err), false, nil
	}
	if c.f.RowGroups > 0 && (pf.NumRows() != c.f.Rows || int64(len(pf.RowGroups())) != c.f.RowGroups) {
		return fmt.Sprintf("%s: %v: %d rows in %d row groups, %s says %d in %d", c.f.Key, ErrIntegrity, pf.NumRows(), len(pf.RowGroups()), c.by, c.f.Rows, c.f.RowGroups), false, nil
	}
	return "", false, nil
}
