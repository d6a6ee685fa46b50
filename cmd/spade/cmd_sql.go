package main

import (
	"bytes"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/duckdb/duckdb-go/v2"
	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/internal/termtext"
	"github.com/spade-pipeline/spade/internal/textcut"
	"github.com/spade-pipeline/spade/pipeline/sqlview"
)

func sortStrings(s []string) { sort.Strings(s) }

// tableNames lists every table a stage of the run writes.
func (a *app) tableNames() []string {
	r, _ := a.runner()
	seen := map[string]bool{}
	var out []string
	for _, s := range r.Stages {
		for _, o := range s.Outputs() {
			if !seen[o.Table] {
				seen[o.Table] = true
				out = append(out, o.Table)
			}
		}
	}
	sort.Strings(out)
	return out
}

// nonFinite names a NaN or infinite double as DuckDB prints it: "nan",
// "inf", "-inf".
func nonFinite(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case f > 0:
		return "inf"
	}
	return "-inf"
}

// plain returns a scanned DuckDB value as plain Go values that
// encoding/json writes the way DuckDB prints them: DECIMAL as an exact
// JSON number (duckdb.Decimal would encode as its Width/Scale/Value
// fields), MAP (duckdb-go's OrderedMap) as an object in key order, a NaN
// or infinite double (which JSON cannot hold) as the string "nan", "inf"
// or "-inf"; lists and structs element by element. A UUID scans as 16
// bytes and is turned into text by writeRows from the column type (at the
// top level only: nested ones carry no type here).
func plain(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nonFinite(x)
		}
	case float32:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return nonFinite(f)
		}
	case duckdb.Decimal:
		if x.Value != nil {
			return json.Number(x.String())
		}
	case duckdb.OrderedMap:
		var out duckdb.OrderedMap
		vals := x.Values()
		for i, k := range x.Keys() {
			out.Set(plain(k), plain(vals[i]))
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	}
	return v
}

func newSQLCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   `sql "QUERY"`,
		Short: "Query the run with DuckDB: one view per table (all rounds, with a round column)",
		Long: `Query the run with DuckDB. Each table of the run is a view over exactly the
files its committed manifests list, across every round, with an added
"round" column; e.g. spade sql "select round, avg(regret) from labels group by round".
A table committed with no rows is an empty view with the table's columns.

The query is one read statement: one that DuckDB classifies as a SELECT
(` + sqlview.ReadStatements + `).
Other statements (COPY, ATTACH, EXPORT, INSTALL, LOAD, CREATE, DROP, SET,
CALL, EXPLAIN, ...), several statements, and any file other than the
run's table files are refused with exit code 2 (docs/cli.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case "table", "csv", "json":
			default:
				return usagef("--format %q: want table, csv or json", format)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			// A private spill directory: DuckDB's default (.tmp in the
			// working directory) could be a symlink, and queries may read it.
			tmp, err := os.MkdirTemp("", "spade-sql-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			db, views, err := sqlview.Open(ctx, a.store, g.runName, sqlview.Options{Tables: a.tableNames(), TempDir: tmp})
			if err != nil {
				return err
			}
			defer db.Close()
			rows, err := sqlview.Query(ctx, db, args[0])
			if err != nil {
				return queryError(withTables(err, g.runName, views))
			}
			defer rows.Close()
			return writeRows(os.Stdout, rows, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output format: table, csv or json")
	return cmd
}

// tableSignificant is how many significant digits a DOUBLE or FLOAT shows
// in --format table, as pandas and R show them (6 and 7): enough to read a
// rate or a mean, without the binary noise of 0.27109374999999997.
const tableSignificant = 6

// tableFloat formats a top-level DOUBLE or FLOAT for --format table with
// tableSignificant significant digits, trailing zeros dropped: a whole
// number as an integer (every digit of it, up to 1e15), 1e-4 <= |x| < 1e15
// in positional notation (0.271094, 1234568), other magnitudes in
// exponent notation (1.5e-07); NaN and infinities as DuckDB prints them.
// It returns "" for any other value. csv and json print every digit.
func tableFloat(v any) string {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	default:
		return ""
	}
	a := math.Abs(f)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return nonFinite(f)
	case f == 0:
		return "0"
	case f == math.Trunc(f) && a < 1e15:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case a >= 1e-4 && a < 1e15:
		digits := max(0, tableSignificant-1-int(math.Floor(math.Log10(a))))
		s := strconv.FormatFloat(f, 'f', digits, 64)
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		if s == "-0" {
			s = "0"
		}
		return s
	}
	return strconv.FormatFloat(f, 'g', tableSignificant, 64)
}

// unknownTable matches DuckDB's error for a table or view name that does
// not exist, and the suggestion it may add, which comes from DuckDB's own
// catalog (pg_sequences, duckdb_tables) rather than from the run.
var (
	unknownTable = regexp.MustCompile(`Table with name (.+?) does not exist!`)
	didYouMean   = regexp.MustCompile(`\s*Did you mean "([^"]*)"\?`)
)

// withTables adds the run's views to DuckDB's error for an unknown table,
// in place of DuckDB's suggestion unless that is one of them: the one
// list that helps is the tables the query can read. Other errors are
// returned as they are.
func withTables(err error, run string, views []sqlview.View) error {
	var de *duckdb.Error
	if !errors.As(err, &de) || de.Type != duckdb.ErrorTypeCatalog || !unknownTable.MatchString(de.Msg) {
		return err
	}
	names := make([]string, len(views))
	for i, v := range views {
		names[i] = v.Table
	}
	msg := de.Msg
	if m := didYouMean.FindStringSubmatchIndex(msg); m != nil && !slices.Contains(names, msg[m[2]:m[3]]) {
		msg = msg[:m[0]] + msg[m[1]:]
	}
	list := "none yet (run a round first)"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	end := unknownTable.FindStringIndex(msg)[1]
	return fmt.Errorf("%s The tables of run %s are: %s (a table with no committed round has no view).%s", msg[:end], run, list, msg[end:])
}

// queryError prefixes an error of the query with "query: "; a refusal
// (*sqlview.RefusedError, a DuckDB permission error included) is a usage
// error (exit 2), any other error a failure (exit 1).
func queryError(err error) error {
	err = sqlview.Refusal(err)
	if errors.As(err, new(*sqlview.RefusedError)) {
		return usagef("query: %w", err)
	}
	return fmt.Errorf("query: %w", err)
}

// writeRows writes the result rows to w in format: "json" (JSON Lines),
// "csv", or anything else as an aligned text table.
func writeRows(w io.Writer, rows *sql.Rows, format string) error {
	cols, records, err := scanRecords(rows)
	if err != nil {
		return err
	}
	switch format {
	case "json":
		return writeJSONRows(w, cols, records)
	case "csv":
		return writeCSVRows(w, cols, records)
	}
	return writeTableRows(w, cols, records)
}

// scanRecords reads every row of rows into memory with its column names;
// split out of writeRows so each output format is its own function.
func scanRecords(rows *sql.Rows) ([]string, [][]any, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, nil, err
	}
	var records [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		// A top-level UUID scans as its 16 bytes: print it as DuckDB does.
		for i, v := range vals {
			if b, ok := v.([]byte); ok && len(b) == 16 && types[i].DatabaseTypeName() == "UUID" {
				u := duckdb.UUID(b)
				vals[i] = u.String()
			}
		}
		records = append(records, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, queryError(err)
	}
	return cols, records, nil
}

// cellText is one value as text for the csv and table formats, shared by
// both writers.
func cellText(v any) string {
	p := plain(v)
	switch x := p.(type) {
	case nil:
		return "NULL"
	case []byte:
		return string(x)
	case string:
		return x
	}
	if b, err := json.Marshal(p); err == nil {
		// Numbers, booleans, times as JSON; a string-valued one (a
		// time) without its quotes; lists, structs and maps as JSON.
		if len(b) > 1 && b[0] == '"' {
			var str string
			if json.Unmarshal(b, &str) == nil {
				return str
			}
		}
		return string(b)
	}
	return fmt.Sprint(v)
}

// writeJSONRows is writeRows' "json" format, split out of it.
func writeJSONRows(w io.Writer, cols []string, records [][]any) error {
	// JSON Lines: one object per row, keys in column order; a name
	// that repeats (select 1 as a, 2 as a; a join's shared columns)
	// gets _2, _3, ... so no column is lost.
	keys := make([][]byte, len(cols))
	taken := map[string]bool{} // every column's own name, then each key used
	for _, c := range cols {
		taken[c] = true
	}
	used := map[string]bool{}
	for i, c := range cols {
		name := c
		if used[name] {
			for n := 2; taken[name]; n++ {
				name = fmt.Sprintf("%s_%d", c, n)
			}
		}
		used[name], taken[name] = true, true
		keys[i], _ = json.Marshal(name)
	}
	var line []byte
	for _, rec := range records {
		line = append(line[:0], '{')
		for i, v := range rec {
			b, err := json.Marshal(plain(v))
			if err != nil {
				return fmt.Errorf("row value of column %s: %w", cols[i], err)
			}
			if i > 0 {
				line = append(line, ',')
			}
			line = append(append(append(line, keys[i]...), ':'), b...)
		}
		line = append(line, '}', '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}

// writeCSVRows is writeRows' "csv" format, split out of it.
func writeCSVRows(w io.Writer, cols []string, records [][]any) error {
	// RFC 4180 through encoding/csv, with DuckDB's convention for
	// NULL: an empty unquoted field is NULL, a quoted "" the empty
	// string (read_csv reads them back so). encoding/csv never quotes
	// an empty field, so a row holding an empty string is put together
	// here from fields quoted one at a time by encoding/csv.
	cw := csv.NewWriter(w)
	_ = cw.Write(cols)
	var fb bytes.Buffer
	fw := csv.NewWriter(&fb)
	for _, rec := range records {
		line := make([]string, len(rec))
		empty := len(rec) == 1 && rec[0] == nil
		for i, v := range rec {
			if v != nil {
				line[i] = cellText(v)
				empty = empty || line[i] == ""
			}
		}
		if !empty {
			_ = cw.Write(line)
			continue
		}
		var row []byte
		if len(rec) == 1 && rec[0] == nil {
			// A lone NULL would be a blank line, which CSV readers skip:
			// write "" as Python's csv module does (NULL and '' are then
			// alike in a one-column result).
			row = append(row, '"', '"')
		}
		for i, v := range rec {
			if i > 0 {
				row = append(row, ',')
			}
			switch {
			case v == nil:
			case line[i] == "":
				row = append(row, '"', '"')
			default:
				fb.Reset()
				_ = fw.Write(line[i : i+1])
				fw.Flush()
				row = append(row, bytes.TrimSuffix(fb.Bytes(), []byte("\n"))...)
			}
		}
		cw.Flush()
		if _, err := w.Write(append(row, '\n')); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeTableRows is writeRows' aligned text table, split out of it.
func writeTableRows(w io.Writer, cols []string, records [][]any) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for i, c := range cols {
		cols[i] = termtext.Safe(c)
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, rec := range records {
		line := make([]string, len(rec))
		for i, v := range rec {
			s := tableFloat(v)
			if s == "" {
				s = cellText(v)
			}
			if len(s) > 80 {
				s = textcut.Prefix(s, 77) + "..."
			}
			line[i] = termtext.Safe(strings.ReplaceAll(s, "\n", " "))
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	return tw.Flush()
}
