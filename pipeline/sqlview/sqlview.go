// Package sqlview opens DuckDB over a run: one view per table, over exactly
// the files the committed manifests list (readers never list directories),
// with a round column (docs/design.md "DuckDB over the outputs").
//
// The database Open returns is confined: DuckDB may open the run's table
// files and nothing else, installs or loads no further extension, and
// refuses any change of its settings. Query runs one statement, and only one that DuckDB classifies
// as a SELECT (docs/cli.md "sql").
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

	duckdb "github.com/duckdb/duckdb-go/v2" // also registers the "duckdb" driver
	"github.com/parquet-go/parquet-go"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/schemas"
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
	// TempDir is where DuckDB may spill a query larger than its memory
	// limit: a private directory the caller created (os.MkdirTemp) and
	// removes after Close. DuckDB lets queries read and list its temp
	// directory, so it must hold nothing else; its default, .tmp in the
	// working directory, could be a symlink to anywhere. "" disables
	// spilling (such a query fails with an out-of-memory error).
	TempDir string
}

// View describes one created view.
type View struct {
	// Table is the view's name, the table's name.
	Table string
	// Rounds lists the rounds with a committed manifest of the table, in
	// increasing order (rounds whose manifest lists no files included).
	Rounds []int
	// Files is the number of Parquet files the view reads; 0 for a table
	// committed with no rows in every round, whose view is empty.
	Files int
	// Rows is the view's row count, summed from the manifests.
	Rows int64
}

// Open creates an in-memory DuckDB database with one view per table of run
// across its committed rounds. Files of a file:// store are read in place;
// other stores' files are copied to the cache, verified by sha256. A table
// whose committed manifests list no files (the stage emitted no rows) is an
// empty view with the columns and DuckDB types its schema's Parquet files
// have (round INTEGER first); a table with no committed manifest has no
// view.
//
// Once the views exist, the database is confined (confine): DuckDB may
// open only the files the views read, loads and installs no extension, and
// refuses every later change of a setting. Errors: the run file or a
// manifest cannot be read, a file fails its size or sha256 check
// (pipeline.ErrIntegrity), an empty table's schema is not this build's, or
// DuckDB refuses a view or a setting.
func Open(ctx context.Context, s storage.Store, run string, opts Options) (*sql.DB, []View, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, nil, fmt.Errorf("open duckdb: %w", err)
	}
	db.SetMaxOpenConns(1)
	views, paths, err := createViews(ctx, db, s, run, opts)
	if err == nil {
		err = confine(ctx, db, paths, opts.TempDir)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, views, nil
}

// confine applies DuckDB's own access settings to db: temp_directory =
// tempDir (DuckDB adds it to the allowed directories once external access
// is off, so it is set first, to a private directory or to "" for none);
// allowed_paths = paths (the only files DuckDB may open, to read or to
// write; DuckDB takes it only while external access is enabled),
// autoinstall_known_extensions and autoload_known_extensions = false,
// enable_external_access = false (no other file, no network, no extension
// install or load, no ATTACH), and last lock_configuration = true (no SET,
// RESET or PRAGMA may change any setting afterwards). It then reads
// allowed_directories back and fails unless it names tempDir alone (or
// nothing).
func confine(ctx context.Context, db *sql.DB, paths []string, tempDir string) error {
	quoted := make([]string, len(paths))
	for i, p := range paths {
		quoted[i] = quote(p)
	}
	if tempDir != "" {
		abs, err := filepath.Abs(tempDir)
		if err != nil {
			return fmt.Errorf("confine duckdb: temp dir %s: %w", tempDir, err)
		}
		tempDir = abs
	}
	for _, q := range []string{
		"SET temp_directory = " + quote(tempDir),
		"SET allowed_paths = [" + strings.Join(quoted, ", ") + "]",
		"SET autoinstall_known_extensions = false",
		"SET autoload_known_extensions = false",
		"SET enable_external_access = false",
		"SET lock_configuration = true",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("confine duckdb: %s: %w", strings.SplitN(q, " = ", 2)[0], err)
		}
	}
	var dirs []any
	if err := db.QueryRowContext(ctx, "SELECT current_setting('allowed_directories')").Scan(&dirs); err != nil {
		return fmt.Errorf("confine duckdb: read allowed_directories: %w", err)
	}
	for _, d := range dirs {
		if s, ok := d.(string); !ok || tempDir == "" || strings.TrimSuffix(s, "/") != strings.TrimSuffix(tempDir, "/") {
			return fmt.Errorf("confine duckdb: DuckDB allows directory %v, not only the temp dir %q", d, tempDir)
		}
	}
	return nil
}

// createViews creates in db one view per table of opts.Tables over run's
// committed manifests (rounds 0..NextRound, capped by opts.MaxRound) and
// returns the views and the local file paths DuckDB may read.
func createViews(ctx context.Context, db *sql.DB, s storage.Store, run string, opts Options) ([]View, []string, error) {
	if _, err := pipeline.ReadRunFile(ctx, s, run); err != nil {
		return nil, nil, err
	}
	local, err := localFiles(ctx, s, opts)
	if err != nil {
		return nil, nil, err
	}
	// Sealed rounds plus the one in progress (its committed tables show).
	last, err := pipeline.NextRound(ctx, s, run)
	if err != nil {
		return nil, nil, err
	}
	if opts.MaxRound > 0 {
		last = min(last, opts.MaxRound)
	}
	seals, err := readSeals(ctx, s, run, last)
	if err != nil {
		return nil, nil, err
	}
	var views []View
	var allowed []string
	for _, t := range opts.Tables {
		v := View{Table: t}
		var selects []string
		var empty *pipeline.Manifest // a manifest of t that lists no files
		for r := 0; r <= last; r++ {
			m, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey(run, r, t))
			seal := seals[r]
			if errors.Is(err, storage.ErrNotFound) {
				if seal != nil && seal.Tables[t] != "" {
					return nil, nil, fmt.Errorf("%s, listed in %s, is missing: %w", pipeline.ManifestKey(run, r, t), pipeline.SealKey(run, r), pipeline.ErrIntegrity)
				}
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			if seal != nil {
				if _, listed := seal.Tables[t]; !listed {
					return nil, nil, fmt.Errorf("%s: %w: round %d is sealed and %s does not list table %s", pipeline.ManifestKey(run, r, t), pipeline.ErrIntegrity, r, pipeline.SealKey(run, r), t)
				}
				if err := pipeline.MatchSeal(run, seal, t, m); err != nil {
					return nil, nil, err
				}
			}
			if len(m.Files) == 0 {
				v.Rounds = append(v.Rounds, r)
				empty = m
				continue
			}
			var paths []string
			for _, f := range m.Files {
				p, err := local(f)
				if err != nil {
					return nil, nil, err
				}
				paths = append(paths, quote(p))
				allowed = append(allowed, p)
			}
			v.Rounds = append(v.Rounds, r)
			v.Files += len(m.Files)
			v.Rows += m.Rows
			// hive_partitioning = false: the file keys contain "round=NNNNNN",
			// which DuckDB would otherwise add as a second "round" column
			// (and UNION ALL BY NAME over two rounds then fails).
			// A table that stores a round column of its own (evals: the
			// round of the scored checkpoint, equal to its manifest's
			// round when a stage wrote it) shows the manifest's in its
			// place: two "round" columns would break UNION ALL BY NAME.
			star := "*"
			if hasRoundColumn(m) {
				star = "* EXCLUDE (round)"
			}
			selects = append(selects, fmt.Sprintf("SELECT %d::INTEGER AS round, %s FROM read_parquet([%s], hive_partitioning = false)", r, star, strings.Join(paths, ", ")))
		}
		if len(selects) == 0 && empty != nil {
			q, err := emptySelect(ctx, db, empty)
			if err != nil {
				return nil, nil, err
			}
			selects = append(selects, q)
		}
		if len(selects) == 0 {
			continue
		}
		q := fmt.Sprintf("CREATE VIEW %s AS %s", ident(t), strings.Join(selects, " UNION ALL BY NAME "))
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, nil, fmt.Errorf("create view %s: %w", t, err)
		}
		views = append(views, v)
	}
	return views, allowed, nil
}

// localFiles returns how createViews gets a local path to each file of a
// manifest: a filestore's files are read in place once checked against the
// manifest (size, sha256), any other store's are copied into
// opts.CacheDir (default the user cache dir's "spade") and reused while
// they still match. Split out of createViews to keep it short; errors are
// the cache dir's.
func localFiles(ctx context.Context, s storage.Store, opts Options) (func(f pipeline.FileEntry) (string, error), error) {
	if fs, ok := s.(*filestore.Store); ok {
		// Read in place, but only after checking size and sha256 against
		// the manifest, as every other reader does (pipeline.ReadVerified):
		// DuckDB would otherwise return rows from a damaged file silently.
		return func(f pipeline.FileEntry) (string, error) {
			// fs.Root() is absolute (filestore.New), so p is the path
			// allowed_paths names, whatever the working directory.
			p := filepath.Join(fs.Root(), filepath.FromSlash(f.Key))
			return p, verifyFile(p, f)
		}, nil
	}
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
	// Absolute, so that the paths DuckDB opens are those allowed_paths
	// names, whatever the working directory.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cache dir %s: %w", dir, err)
	}
	dir = abs
	return func(f pipeline.FileEntry) (string, error) {
		p := filepath.Join(dir, f.SHA256+".parquet")
		// A copy is reused only if it still hashes to the manifest's
		// sha256; a damaged one is fetched again.
		if st, err := os.Stat(p); err == nil && st.Size() == f.Bytes && verifyFile(p, f) == nil {
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
	}, nil
}

// readSeals returns the seals of run's rounds 0..last, by round (a round
// without one is absent); split out of createViews to keep it short.
func readSeals(ctx context.Context, s storage.Store, run string, last int) (map[int]*pipeline.Seal, error) {
	// Seals are trusted, manifests are checked against them: a sealed
	// round's manifest whose content digest is not the one its seal
	// records (a hand edit, files swapped with the totals fixed) is
	// refused, naming it, as spade status refuses it.
	seals := map[int]*pipeline.Seal{}
	for r := 0; r <= last; r++ {
		seal, err := pipeline.ReadSeal(ctx, s, run, r)
		if errors.Is(err, pipeline.ErrNotCommitted) {
			continue
		}
		if err != nil {
			return nil, err
		}
		seals[r] = seal
	}
	return seals, nil
}

// emptySelect returns a SELECT of no rows with the columns of m's table: a
// round INTEGER column, then every column of m.Kind's schema with the type
// DuckDB reads from a Parquet file of that schema. It writes an empty
// Parquet file with the schema (as pipeline/table would, without rows) to
// the temporary directory, has DuckDB DESCRIBE it and removes it. Errors:
// the kind is unknown, its schema fingerprint is not the manifest's (the
// run was written by a build with another schema), or the file cannot be
// written or read.
func emptySelect(ctx context.Context, db *sql.DB, m *pipeline.Manifest) (string, error) {
	kind := schemaKind(m)
	info, ok := schemas.Lookup(kind)
	if !ok {
		return "", fmt.Errorf("table %s round %d: unknown kind %q", m.Table, m.Round, kind)
	}
	if m.SchemaFingerprint != info.Fingerprint() {
		return "", fmt.Errorf("table %s round %d: schema fingerprint %.12s is not this build's %s v%d", m.Table, m.Round, m.SchemaFingerprint, info.Name, info.Version)
	}
	f, err := os.CreateTemp("", "spade-sqlview-*.parquet")
	if err != nil {
		return "", fmt.Errorf("table %s: empty view: %w", m.Table, err)
	}
	defer os.Remove(f.Name())
	w := parquet.NewWriter(f, info.Schema)
	err = w.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("table %s: empty view: write %s: %w", m.Table, f.Name(), err)
	}
	rows, err := db.QueryContext(ctx, "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet("+quote(f.Name())+"))")
	if err != nil {
		return "", fmt.Errorf("table %s: empty view: %w", m.Table, err)
	}
	defer rows.Close()
	cols := []string{"NULL::INTEGER AS round"}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return "", fmt.Errorf("table %s: empty view: %w", m.Table, err)
		}
		if name == "round" {
			continue // the view's own round column stands for it
		}
		cols = append(cols, fmt.Sprintf("CAST(NULL AS %s) AS %s", typ, ident(name)))
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("table %s: empty view: %w", m.Table, err)
	}
	return "SELECT " + strings.Join(cols, ", ") + " WHERE false", nil
}

// verifyFile streams the local file p through sha256 and compares size
// and digest with the manifest's entry (pipeline.ErrIntegrity on mismatch).
func verifyFile(p string, f pipeline.FileEntry) error {
	fh, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w: file missing (%w)", f.Key, pipeline.ErrIntegrity, storage.ErrNotFound)
	}
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

// ReadStatements names, for error messages and docs, the statements Query
// runs: every statement that DuckDB classifies as a SELECT.
const ReadStatements = "SELECT, WITH, VALUES, FROM ..., TABLE, DESCRIBE, SHOW, SUMMARIZE, PIVOT with an IN list, and the PRAGMAs DuckDB turns into a SELECT (table_info, show_tables, version, ...)"

// RefusedError is the error of a query that Check or Query refuses to run
// because it is not one read statement, or because it opens a file other
// than the run's table files.
type RefusedError struct {
	// Kind names what is refused: a statement kind ("COPY statement",
	// "ATTACH statement", ...), "query" when it is not exactly one
	// statement, or "file access".
	Kind string
	// Reason says why, in words.
	Reason string
}

// Error returns "<Kind> refused: <Reason>".
func (e *RefusedError) Error() string { return e.Kind + " refused: " + e.Reason }

// refusedKinds names each statement type Check refuses, and why.
var refusedKinds = map[duckdb.StmtType][2]string{
	duckdb.STATEMENT_TYPE_INSERT:       {"INSERT statement", "it changes table data"},
	duckdb.STATEMENT_TYPE_UPDATE:       {"UPDATE statement", "it changes table data"},
	duckdb.STATEMENT_TYPE_DELETE:       {"DELETE statement", "it changes table data"},
	duckdb.STATEMENT_TYPE_EXPLAIN:      {"EXPLAIN statement", "EXPLAIN ANALYZE runs the statement it explains, a COPY too, and DuckDB gives EXPLAIN and EXPLAIN ANALYZE the same statement type"},
	duckdb.STATEMENT_TYPE_PREPARE:      {"PREPARE statement", "a prepared statement can be any statement"},
	duckdb.STATEMENT_TYPE_EXECUTE:      {"EXECUTE statement", "a prepared statement can be any statement"},
	duckdb.STATEMENT_TYPE_CREATE:       {"CREATE statement", "it adds to the catalog"},
	duckdb.STATEMENT_TYPE_CREATE_FUNC:  {"CREATE FUNCTION statement", "it adds to the catalog"},
	duckdb.STATEMENT_TYPE_ALTER:        {"ALTER statement", "it changes the catalog"},
	duckdb.STATEMENT_TYPE_DROP:         {"DROP statement", "it removes catalog entries"},
	duckdb.STATEMENT_TYPE_TRANSACTION:  {"transaction statement", "a single read statement needs no transaction"},
	duckdb.STATEMENT_TYPE_COPY:         {"COPY statement", "it writes files (COPY TO) or loads files into tables (COPY FROM)"},
	duckdb.STATEMENT_TYPE_EXPORT:       {"EXPORT DATABASE statement", "it writes files"},
	duckdb.STATEMENT_TYPE_ATTACH:       {"ATTACH statement", "it opens or creates database files"},
	duckdb.STATEMENT_TYPE_DETACH:       {"DETACH statement", "it detaches databases"},
	duckdb.STATEMENT_TYPE_LOAD:         {"INSTALL/LOAD statement", "it installs or loads extensions"},
	duckdb.STATEMENT_TYPE_SET:          {"SET/RESET/USE statement", "it changes settings, and the settings are locked"},
	duckdb.STATEMENT_TYPE_VARIABLE_SET: {"SET VARIABLE statement", "it changes session state"},
	duckdb.STATEMENT_TYPE_PRAGMA:       {"PRAGMA statement", "this PRAGMA runs a procedure or changes state; only PRAGMAs that DuckDB turns into a SELECT run"},
	duckdb.STATEMENT_TYPE_CALL:         {"CALL statement", "only statements that DuckDB classifies as SELECT run; SELECT * FROM f(...) reads a table function"},
	duckdb.STATEMENT_TYPE_ANALYZE:      {"ANALYZE statement", "it updates statistics"},
	duckdb.STATEMENT_TYPE_VACUUM:       {"VACUUM/ANALYZE statement", "it rewrites storage or statistics"},
	duckdb.STATEMENT_TYPE_RELATION:     {"relation statement", "it is not a read statement"},
	duckdb.STATEMENT_TYPE_EXTENSION:    {"extension statement (UPDATE EXTENSIONS and the like)", "it runs extension code"},
	duckdb.STATEMENT_TYPE_LOGICAL_PLAN: {"logical plan statement", "it is not a read statement"},
	duckdb.STATEMENT_TYPE_MULTI:        {"multi-statement", "spade sql runs exactly one statement"},
}

// Check prepares query on db (a database from Open) without running it
// and returns nil if it is exactly one statement that DuckDB classifies
// as a SELECT (duckdb.Stmt.StatementType; ReadStatements lists what that
// covers). Otherwise it returns a *RefusedError naming the statement kind
// and why, or DuckDB's error when the query does not parse or bind.
//
// It prepares with duckdb.Conn.Prepare, which refuses a query of zero or
// several statements without running any of them; PrepareContext, which
// database/sql uses, would run every statement but the last while
// preparing, unchecked. Preparing binds the statement, and binding can
// touch files (EXPORT DATABASE creates its directory then): the
// confinement Open applies makes DuckDB refuse that, and the refusal is
// returned as a *RefusedError of Kind "file access".
func Check(ctx context.Context, db *sql.DB, query string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*duckdb.Conn)
		if !ok {
			return fmt.Errorf("sqlview: connection is a %T, not a DuckDB connection", driverConn)
		}
		st, err := c.Prepare(query)
		if err != nil {
			var de *duckdb.Error
			if errors.As(err, &de) {
				return Refusal(err)
			}
			return &RefusedError{Kind: "query", Reason: "spade sql runs exactly one statement, and DuckDB found none or several in it (a PIVOT without an IN list is several)"}
		}
		defer func() { _ = st.Close() }()
		ds, ok := st.(*duckdb.Stmt)
		if !ok {
			return fmt.Errorf("sqlview: statement is a %T, not a DuckDB statement", st)
		}
		typ, err := ds.StatementType()
		if err != nil {
			return err
		}
		if typ == duckdb.STATEMENT_TYPE_SELECT {
			return nil
		}
		k, ok := refusedKinds[typ]
		if !ok {
			k = [2]string{fmt.Sprintf("statement of a kind DuckDB numbers %d (not a SELECT)", typ), "it is not a read statement"}
		}
		return &RefusedError{Kind: k[0], Reason: k[1] + "; spade sql runs only read statements: " + ReadStatements}
	})
}

// Query runs query on db (a database from Open) once Check accepts it and
// returns its rows; the caller closes them. Errors: Check's, or DuckDB's
// (a refused file access as a *RefusedError).
func Query(ctx context.Context, db *sql.DB, query string) (*sql.Rows, error) {
	if err := Check(ctx, db, query); err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, Refusal(err)
	}
	return rows, nil
}

// Refusal returns err as a *RefusedError of Kind "file access" when it is
// DuckDB's permission error (the confinement refused to open a file), and
// err unchanged otherwise. Query applies it; apply it to the errors of
// the rows Query returns too.
func Refusal(err error) error {
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypePermission {
		msg, _, _ := strings.Cut(de.Msg, "\n")
		return &RefusedError{Kind: "file access", Reason: "spade sql reads only the files of the run's tables (" + msg + ")"}
	}
	return err
}

// hasRoundColumn reports whether m's table schema has a top-level column
// named round (schemas.Eval).
func hasRoundColumn(m *pipeline.Manifest) bool {
	info, ok := schemas.Lookup(schemaKind(m))
	if !ok {
		return false
	}
	for _, f := range info.Schema.Fields() {
		if f.Name() == "round" {
			return true
		}
	}
	return false
}

// schemaKind is the schemas registry name of m's table: its Kind, or the
// table name for manifests written before Kind existed.
func schemaKind(m *pipeline.Manifest) string {
	if m.Kind != "" {
		return m.Kind
	}
	return m.Table
}
