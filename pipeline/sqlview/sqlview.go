// Package sqlview opens DuckDB over a run: one view per table, over exactly
// the files the committed manifests list (readers never list directories),
// with a round column (DESIGN.md "DuckDB over the outputs").
package sqlview

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" driver

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
)

// Options configures Open.
type Options struct {
	// Tables are the table names to expose (every stage output).
	Tables []string
	// CacheDir holds local copies of remote files (S3); default is the
	// user cache directory + "/spade".
	CacheDir string
	// MaxRound bounds the rounds scanned (0 = up to the first unsealed
	// round, whose committed tables are included).
	MaxRound int
}

// View describes one created view.
type View struct {
	// Table is the view's name, the table's name.
	Table string
	// Rounds lists the rounds with a committed manifest of the table, in
	// increasing order (rounds whose manifest lists no files included).
	Rounds []int
	// Files is the number of Parquet files the view reads.
	Files int
	// Rows is the view's row count, summed from the manifests.
	Rows int64
}

// Open creates an in-memory DuckDB database with one view per table of run
// across its committed rounds. Files of a file:// store are read in place;
// other stores' files are copied to the cache, verified by sha256.
func Open(ctx context.Context, s storage.Store, run string, opts Options) (*sql.DB, []View, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, nil, fmt.Errorf("open duckdb: %w", err)
	}
	db.SetMaxOpenConns(1)
	views, err := createViews(ctx, db, s, run, opts)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, views, nil
}

func createViews(ctx context.Context, db *sql.DB, s storage.Store, run string, opts Options) ([]View, error) {
	if _, err := pipeline.ReadRunFile(ctx, s, run); err != nil {
		return nil, err
	}
	var local func(f pipeline.FileEntry) (string, error)
	if fs, ok := s.(*filestore.Store); ok {
		// Read in place, but only after checking size and sha256 against
		// the manifest, as every other reader does (pipeline.ReadVerified):
		// DuckDB would otherwise return rows from a damaged file silently.
		local = func(f pipeline.FileEntry) (string, error) {
			p := filepath.Join(fs.Root(), filepath.FromSlash(f.Key))
			return p, verifyFile(p, f)
		}
	} else {
		dir := opts.CacheDir
		if dir == "" {
			base, err := os.UserCacheDir()
			if err != nil {
				base = os.TempDir()
			}
			dir = filepath.Join(base, "spade")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cache dir %s: %w", dir, err)
		}
		local = func(f pipeline.FileEntry) (string, error) {
			p := filepath.Join(dir, f.SHA256+".parquet")
			if st, err := os.Stat(p); err == nil && st.Size() == f.Bytes {
				return p, nil
			}
			data, err := pipeline.ReadVerified(ctx, s, f)
			if err != nil {
				return "", err
			}
			tmp := p + ".tmp"
			if err := os.WriteFile(tmp, data, 0o644); err != nil {
				return "", err
			}
			return p, os.Rename(tmp, p)
		}
	}
	// Sealed rounds plus the one in progress (its committed tables show).
	last, err := pipeline.NextRound(ctx, s, run)
	if err != nil {
		return nil, err
	}
	if opts.MaxRound > 0 {
		last = min(last, opts.MaxRound)
	}
	var views []View
	for _, t := range opts.Tables {
		v := View{Table: t}
		var selects []string
		for r := 0; r <= last; r++ {
			m, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey(run, r, t))
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if len(m.Files) == 0 {
				v.Rounds = append(v.Rounds, r)
				continue
			}
			var paths []string
			for _, f := range m.Files {
				p, err := local(f)
				if err != nil {
					return nil, err
				}
				paths = append(paths, quote(p))
			}
			v.Rounds = append(v.Rounds, r)
			v.Files += len(m.Files)
			v.Rows += m.Rows
			// hive_partitioning = false: the file keys contain "round=NNNNNN",
			// which DuckDB would otherwise add as a second "round" column
			// (and UNION ALL BY NAME over two rounds then fails).
			selects = append(selects, fmt.Sprintf("SELECT %d::INTEGER AS round, * FROM read_parquet([%s], hive_partitioning = false)", r, strings.Join(paths, ", ")))
		}
		if len(selects) == 0 {
			continue
		}
		q := fmt.Sprintf("CREATE VIEW %s AS %s", ident(t), strings.Join(selects, " UNION ALL BY NAME "))
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("create view %s: %w", t, err)
		}
		views = append(views, v)
	}
	return views, nil
}

// verifyFile streams the local file p through sha256 and compares size
// and digest with the manifest's entry (pipeline.ErrIntegrity on mismatch).
func verifyFile(p string, f pipeline.FileEntry) error {
	fh, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("read %s: %w", f.Key, err)
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return fmt.Errorf("read %s: %w", f.Key, err)
	}
	if n != f.Bytes {
		return fmt.Errorf("%s: %w: %d bytes, manifest says %d", f.Key, pipeline.ErrIntegrity, n, f.Bytes)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("%s: %w: sha256 %s, manifest says %s", f.Key, pipeline.ErrIntegrity, got[:12], f.SHA256[:12])
	}
	return nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
