package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
)

// fuzzManifest is a valid manifest for the seed corpus.
func fuzzManifest() []byte {
	m := &pipeline.Manifest{
		FormatVersion: pipeline.FormatVersion, Run: "r", Round: 1, Table: "labels", Kind: "labels",
		SchemaVersion: 1, SchemaFingerprint: strings.Repeat("ab", 32), Stage: "label", StageFingerprint: strings.Repeat("cd", 32),
		ConfigDigest: strings.Repeat("ef", 32), Seed: 7, CodeVersion: "(devel)", Libraries: map[string]string{"go": "go1.26"},
		Files: []pipeline.FileEntry{{Key: "r/round=000001/labels/part-00000-of-00001-0123456789abcdef.parquet", SHA256: strings.Repeat("01", 32), Bytes: 10, Rows: 2, RowGroups: 1}},
		Rows:  2, Bytes: 10, Inputs: []pipeline.InputRef{{Table: "rollouts", Round: 1, Key: "r/round=000001/rollouts/_manifest.json", Digest: "x"}},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Stats: map[string]any{"parts": 1.0},
	}
	return m.Encode()
}

// FuzzDecodeManifest: DecodeManifest never panics on any bytes (a
// manifest is read from storage anyone may have written to); an error
// names the key; an accepted manifest is internally consistent and
// survives Encode/Decode unchanged, content digest included.
func FuzzDecodeManifest(f *testing.F) {
	good := fuzzManifest()
	f.Add(good)
	f.Add(bytes.Replace(good, []byte(`"format_version": 1`), []byte(`"format_version": 2`), 1))
	f.Add(bytes.Replace(good, []byte(`"rows": 2,`), []byte(`"rows": 3,`), 1))
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"format_version":1,"table":"t","files":[{"key":"../x","sha256":"` + strings.Repeat("0", 64) + `"}]}`))
	f.Add([]byte(`{"format_version":1,"table":"t","extra":true}`))
	f.Add([]byte(`{"format_version":null}`))
	f.Add([]byte(`[]`))
	const key = "run/round=000001/t/_manifest.json"
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := pipeline.DecodeManifest(key, data)
		if err != nil {
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error does not name the manifest: %v", err)
			}
			return
		}
		if m.FormatVersion != pipeline.FormatVersion || m.Table == "" {
			t.Fatalf("accepted manifest with version %d, table %q", m.FormatVersion, m.Table)
		}
		var rows, size int64
		for _, fe := range m.Files {
			if storage.ValidateKey(fe.Key) != nil || len(fe.SHA256) != 64 {
				t.Fatalf("accepted file entry %+v", fe)
			}
			rows += fe.Rows
			size += fe.Bytes
		}
		if rows != m.Rows || size != m.Bytes {
			t.Fatalf("accepted totals (%d, %d) for files (%d, %d)", m.Rows, m.Bytes, rows, size)
		}
		again, err := pipeline.DecodeManifest(key, m.Encode())
		if err != nil {
			t.Fatalf("re-decode of an accepted manifest: %v", err)
		}
		if again.ContentDigest() != m.ContentDigest() || !bytes.Equal(again.Encode(), m.Encode()) {
			t.Fatalf("manifest changed through Encode/Decode")
		}
	})
}

// FuzzReadSeal: a round seal of any bytes is read without panic; errors
// name the seal's key or say the round is not committed; an accepted seal
// is of this format version and its digest is stable.
func FuzzReadSeal(f *testing.F) {
	f.Add([]byte(`{"format_version":1,"run":"r","round":1,"parent":"p","tables":{"a":"1","b":"2"},"manifests":{"a":"r/round=000001/a/_manifest.json"},"created_at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"format_version":3,"run":"r","round":1}`))
	f.Add([]byte(`{"format_version":1,"tables":null}`))
	f.Add([]byte(`{"format_version":1,"tables":{"a":1}}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		s := memstore.New("fuzz-seal")
		defer s.Close()
		key := pipeline.SealKey("r", 1)
		if err := storage.PutBytes(ctx, s, key, data); err != nil {
			t.Fatal(err)
		}
		seal, err := pipeline.ReadSeal(ctx, s, "r", 1)
		if err != nil {
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error does not name the seal: %v", err)
			}
			return
		}
		if seal.FormatVersion != pipeline.FormatVersion {
			t.Fatalf("accepted seal of version %d", seal.FormatVersion)
		}
		if d := seal.Digest(); d != seal.Digest() {
			t.Fatal("seal digest is not stable")
		}
	})
}

// FuzzReadRunFile: a run's _RUN.json of any bytes is read without panic;
// errors name the file; an accepted one is of this format version.
func FuzzReadRunFile(f *testing.F) {
	f.Add([]byte(`{"format_version":1,"run":"r","config_digest":"d","config":{"seed":7,"sample":{"slots":3}},"code_version":"(devel)","created_at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"format_version":2}`))
	f.Add([]byte(`{"format_version":1,"config":{"sample":{"skills":"x"}}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		s := memstore.New("fuzz-run")
		defer s.Close()
		key := pipeline.RunFileKey("r")
		if err := storage.PutBytes(ctx, s, key, data); err != nil {
			t.Fatal(err)
		}
		rf, err := pipeline.ReadRunFile(ctx, s, "r")
		if err != nil {
			if !strings.Contains(err.Error(), key) && !errors.Is(err, pipeline.ErrNotCommitted) {
				t.Fatalf("error does not name the run file: %v", err)
			}
			return
		}
		if rf.FormatVersion != pipeline.FormatVersion {
			t.Fatalf("accepted run file of version %d", rf.FormatVersion)
		}
	})
}
