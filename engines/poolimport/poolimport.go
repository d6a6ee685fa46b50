// Package poolimport reads the environments that `spade pool import`
// commits as a fixed pool (design.mode fixed_pool): a directory of .py
// files, JSONL (optionally gzip) or Parquet rows, each environment named
// by file and row in every error. The stage that validates and commits
// them is stages/validate.PoolImport.
package poolimport

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"

	"github.com/spade-pipeline/spade/datasets"
	"github.com/spade-pipeline/spade/engines/prompt"
)

// The columns (Parquet) and fields (JSONL) a pool file's rows are read
// from (docs/cli.md "pool import"). Other columns are ignored.
const (
	// ColumnSource is the environment's Python program (a string, required).
	ColumnSource = "source"
	// ColumnID names the environment in the import (a string, optional;
	// default "<file base name>#<row>"); it becomes the rows' slot_id.
	ColumnID = "id"
	// ColumnSkill is the environment's skill (a string, optional; default
	// the class's skill attribute, then Options.Skill).
	ColumnSkill = "skill"
)

// The input formats of Options.Format.
const (
	// FormatAuto tells each path's format by its kind and name: a
	// directory is FormatDir, then .py, .jsonl/.ndjson/.json (optionally
	// .gz) and .parquet.
	FormatAuto = "auto"
	// FormatDir is a directory: every *.py file under it, in lexical path
	// order.
	FormatDir = "dir"
	// FormatPy is one Python file, one environment.
	FormatPy = "py"
	// FormatJSONL is one JSON object per line (gzip when the name ends
	// in .gz), one environment per non-blank line.
	FormatJSONL = "jsonl"
	// FormatParquet is a Parquet file, one environment per row.
	FormatParquet = "parquet"
)

// DefaultSkill is the skill of an imported environment whose row, class
// and options name none.
const DefaultSkill = "unspecified"

// KindImported is the kind (schemas.Environment.Kind, the prompt kind of
// designed environments) of every imported environment.
const KindImported = "imported"

// EnvsPerPart is the unit of the import's work: the number of
// environments each part validates and commits (its own part files).
const EnvsPerPart = 256

// Options says what `spade pool import` reads.
type Options struct {
	// Paths are the inputs, in order: directories (every *.py file under
	// them, in lexical path order), single .py files, JSONL files (.jsonl,
	// .ndjson, optionally .gz) and Parquet files (.parquet).
	Paths []string
	// Format is FormatAuto (by extension, a directory is FormatDir) or
	// the one format of every path.
	Format string
	// Skill is the skill of environments whose row and class name none
	// ("" means DefaultSkill).
	Skill string
}

// Entry is one environment read from the import's inputs.
type Entry struct {
	// ID names it in the import: the path under its directory (slash
	// separated), a .py file's base name, or the row's id column
	// (default "<file base name>#<row>"). Unique in an import.
	ID string
	// Skill is the row's skill column ("" when it has none).
	Skill string
	// Source is the Python program.
	Source string
	// EnvID is prompt.EnvID(Source), the key every table uses.
	EnvID string
	// File is the path it was read from, as given (or under the given
	// directory); it names the entry in errors and reports, not in any
	// table.
	File string
	// Row is its 1-based row in File (the line of a JSONL file), or 0 for
	// a .py file.
	Row int64
}

// Where names the entry's origin: "FILE" or "FILE row N".
func (e Entry) Where() string {
	if e.Row == 0 {
		return e.File
	}
	return fmt.Sprintf("%s row %d", e.File, e.Row)
}

// Report is what Read read.
type Report struct {
	// Files is the number of files read.
	Files int `json:"files"`
	// Read is the number of environments read from them, duplicates
	// included.
	Read int `json:"read"`
	// Duplicates lists, for each environment whose normalised source is
	// that of an earlier one (the same env_id), "WHERE: same source as ID";
	// only the first is imported.
	Duplicates []string `json:"duplicates,omitempty"`
}

// ErrBadInput wraps every error of Read about the inputs' content:
// a row without a string source, a malformed JSON line, a corrupt Parquet
// file, two different sources with one id, no environment at all. Its message names
// the file, the row and the field.
var ErrBadInput = errors.New("bad pool input")

func badInput(where, field, format string, a ...any) error {
	if field != "" {
		where += ": field " + field
	}
	return fmt.Errorf("%s: %w: %s", where, ErrBadInput, fmt.Sprintf(format, a...))
}

// CheckOptions checks the options without reading any input: at least
// one path, a known format. Its errors are usage errors.
func (o Options) CheckOptions() error {
	if len(o.Paths) == 0 {
		return errors.New("no input path")
	}
	switch o.Format {
	case FormatAuto, FormatDir, FormatPy, FormatJSONL, FormatParquet:
		return nil
	}
	return fmt.Errorf("--format %q: want auto, dir, py, jsonl or parquet", o.Format)
}

// formatOf resolves the format of path p (FormatAuto by extension).
func (o Options) formatOf(p string, fi os.FileInfo) (string, error) {
	if o.Format != FormatAuto {
		if (o.Format == FormatDir) != fi.IsDir() {
			return "", fmt.Errorf("%s: --format %s does not fit a %s", p, o.Format, map[bool]string{true: "directory", false: "file"}[fi.IsDir()])
		}
		return o.Format, nil
	}
	if fi.IsDir() {
		return FormatDir, nil
	}
	name := strings.ToLower(strings.TrimSuffix(strings.ToLower(p), ".gz"))
	switch {
	case strings.HasSuffix(p, ".py"):
		return FormatPy, nil
	case strings.HasSuffix(name, ".jsonl"), strings.HasSuffix(name, ".ndjson"), strings.HasSuffix(name, ".json"):
		return FormatJSONL, nil
	case strings.HasSuffix(name, ".parquet"):
		return FormatParquet, nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from the name (want a directory, .py, .jsonl[.gz], .ndjson or .parquet); set --format", p)
}

// PathError is Read's error for a path that cannot be read at all
// (missing, unreadable, of no known format): a usage error of the CLI.
type PathError struct{ Err error }

// Error returns the wrapped error's message.
func (e *PathError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PathError) Unwrap() error { return e.Err }

// Read reads every environment of opts.Paths, in path order (a
// directory's files in lexical order, a file's rows in order), drops the
// later copies of a source already read (listed in the report's
// Duplicates, whatever their ids) and returns the rest. Errors: *PathError for a path that is
// missing, unreadable or of no known format; an error wrapping
// ErrBadInput, naming the file, row and field, for content that cannot
// be read (a row without a non-empty string source, a non-string id or
// skill, a malformed JSON line, a corrupt Parquet file or one without a
// source column, two different sources with one id, no environment in the
// inputs);
// ctx.Err().
func Read(ctx context.Context, opts Options) ([]Entry, Report, error) {
	var rep Report
	if err := opts.CheckOptions(); err != nil {
		return nil, rep, &PathError{err}
	}
	var all []Entry
	for _, p := range opts.Paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, rep, &PathError{fmt.Errorf("pool import: %w", err)}
		}
		if err := regular(p, fi.Mode()); err != nil {
			return nil, rep, err
		}
		format, err := opts.formatOf(p, fi)
		if err != nil {
			return nil, rep, &PathError{err}
		}
		var got []Entry
		switch format {
		case FormatDir:
			got, err = readDir(ctx, p, &rep)
		case FormatPy:
			var e Entry
			e, err = readPy(p, filepath.Base(p))
			got = []Entry{e}
			rep.Files++
		case FormatJSONL:
			got, err = readJSONL(ctx, p)
			rep.Files++
		case FormatParquet:
			got, err = readParquet(ctx, p)
			rep.Files++
		}
		if err != nil {
			return nil, rep, err
		}
		all = append(all, got...)
	}
	rep.Read = len(all)
	byID := map[string]Entry{}
	byEnv := map[string]Entry{}
	var out []Entry
	for _, e := range all {
		if prev, ok := byEnv[e.EnvID]; ok {
			rep.Duplicates = append(rep.Duplicates, fmt.Sprintf("%s: same source as %s (env_id %s)", e.Where(), prev.ID, e.EnvID))
			continue
		}
		if prev, ok := byID[e.ID]; ok {
			return nil, rep, badInput(e.Where(), ColumnID, "id %q is also the id of %s, whose source differs; ids must be unique in an import", e.ID, prev.Where())
		}
		byID[e.ID] = e
		byEnv[e.EnvID] = e
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, rep, fmt.Errorf("%s: %w: no environment found (want *.py files or rows with a %s column)", strings.Join(opts.Paths, ", "), ErrBadInput, ColumnSource)
	}
	return out, rep, nil
}

// entry checks one source and builds its entry.
func entry(where, file string, row int64, id, skill, source string) (Entry, error) {
	if !utf8.ValidString(source) {
		return Entry{}, badInput(where, ColumnSource, "not valid UTF-8")
	}
	if strings.TrimSpace(source) == "" {
		return Entry{}, badInput(where, ColumnSource, "empty")
	}
	return Entry{ID: id, Skill: skill, Source: source, EnvID: prompt.EnvID(source), File: file, Row: row}, nil
}

// regular refuses an input that is neither a regular file nor a
// directory (a FIFO, a socket, a device; issue 27's corpus-import attack):
// opening a FIFO with no writer blocks, out of reach of ctx. A
// *PathError naming the path and its kind.
func regular(p string, m fs.FileMode) error {
	if m.IsDir() || m.IsRegular() {
		return nil
	}
	return &PathError{fmt.Errorf("pool import: %s is a %s, not a regular file or a directory; write it to a file first", p, datasets.FileKind(m))}
}

func readPy(p, id string) (Entry, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return Entry{}, &PathError{fmt.Errorf("pool import: %w", err)}
	}
	return entry(p, p, 0, id, "", string(b))
}

// readDir reads every regular *.py file under root, in lexical order;
// ids are the paths under root, slash separated.
func readDir(ctx context.Context, root string, rep *Report) ([]Entry, error) {
	var out []Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &PathError{fmt.Errorf("pool import: %w", err)}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".py") {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			fi, err := os.Stat(p)
			if err != nil {
				return &PathError{fmt.Errorf("pool import: %w", err)}
			}
			if err := regular(p, fi.Mode()); err != nil {
				return err
			}
		} else if err := regular(p, d.Type()); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		e, err := readPy(p, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		rep.Files++
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w: the directory holds no *.py file", root, ErrBadInput)
	}
	return out, nil
}

// rowEntry reads the source, id and skill fields of row (1-based) of file.
func rowEntry(file string, row int64, m map[string]any) (Entry, error) {
	where := fmt.Sprintf("%s row %d", file, row)
	str := func(field string, required bool) (string, error) {
		v, ok := m[field]
		if !ok || v == nil {
			if required {
				return "", badInput(where, field, "missing")
			}
			return "", nil
		}
		switch s := v.(type) {
		case string:
			return s, nil
		case []byte:
			return string(s), nil
		}
		return "", badInput(where, field, "want a string, got %s", kindOf(v))
	}
	src, err := str(ColumnSource, true)
	if err != nil {
		return Entry{}, err
	}
	id, err := str(ColumnID, false)
	if err != nil {
		return Entry{}, err
	}
	if id == "" {
		id = fmt.Sprintf("%s#%d", filepath.Base(file), row)
	}
	skill, err := str(ColumnSkill, false)
	if err != nil {
		return Entry{}, err
	}
	return entry(where, file, row, id, skill, src)
}

// kindOf names the JSON (or Parquet) kind of a decoded value.
func kindOf(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case json.Number, float64, float32, int, int32, int64, uint32, uint64:
		return "a number"
	}
	return fmt.Sprintf("a value of Go type %T", v)
}

// readJSONL reads one JSON object per non-blank line (gzip when the name
// ends in .gz); rows are numbered by line.
func readJSONL(ctx context.Context, p string) ([]Entry, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, &PathError{fmt.Errorf("pool import: %w", err)}
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(strings.ToLower(p), ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: gzip: %w", p, ErrBadInput, err)
		}
		defer gz.Close()
		r = gz
	}
	br := bufio.NewReader(r)
	var out []Entry
	for line := int64(1); ; line++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("%s: %w: line %d: %w", p, ErrBadInput, line, rerr)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			m, _, _, err := datasets.DecodeJSONLine(bytes.TrimRight(b, "\r\n"), false)
			if err != nil {
				return nil, badInput(fmt.Sprintf("%s row %d", p, line), "", "%v", err)
			}
			e, err := rowEntry(p, line, m)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if rerr != nil {
			return out, nil
		}
	}
}

// readParquet reads every row of a Parquet file with a source column.
func readParquet(ctx context.Context, p string) (out []Entry, err error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, &PathError{fmt.Errorf("pool import: %w", err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &PathError{fmt.Errorf("pool import: %w", err)}
	}
	defer func() {
		// A corrupt file can make the decoder panic: that is bad input.
		if rec := recover(); rec != nil {
			out, err = nil, fmt.Errorf("%s: %w: corrupt Parquet: %v", p, ErrBadInput, rec)
		}
	}()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w: corrupt Parquet: %w", p, ErrBadInput, err)
	}
	schema := pf.Schema()
	if _, ok := schema.Lookup(ColumnSource); !ok {
		return nil, badInput(p, ColumnSource, "the file has no %s column", ColumnSource)
	}
	var row int64
	buf := make([]parquet.Row, 16)
	for _, rg := range pf.RowGroups() {
		rows := rg.Rows()
		for {
			if err := ctx.Err(); err != nil {
				_ = rows.Close()
				return nil, err
			}
			n, rerr := rows.ReadRows(buf)
			for i := 0; i < n; i++ {
				row++
				m := map[string]any{}
				if err := schema.Reconstruct(&m, buf[i]); err != nil {
					_ = rows.Close()
					return nil, badInput(fmt.Sprintf("%s row %d", p, row), "", "cannot decode row: %v", err)
				}
				e, err := rowEntry(p, row, m)
				if err != nil {
					_ = rows.Close()
					return nil, err
				}
				out = append(out, e)
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				_ = rows.Close()
				return nil, fmt.Errorf("%s: %w: after row %d: %w", p, ErrBadInput, row, rerr)
			}
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", p, ErrBadInput, err)
		}
	}
	return out, nil
}

// Digest is the hex sha256 of the entries' ids, skills and sources, in
// order: what an import's tables depend on besides the options' skill and
// the validation settings (File and Row name the input, not the content,
// and are left out).
func Digest(entries []Entry) string {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%d:%s%d:%s%d:%s", len(e.ID), e.ID, len(e.Skill), e.Skill, len(e.Source), e.Source)
	}
	return hex.EncodeToString(h.Sum(nil))
}
