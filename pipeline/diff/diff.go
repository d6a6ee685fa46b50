// Package diff compares committed table versions of two runs, for
// artifact-diff regression tests (`spade diff RUN_A RUN_B`, docs/design.md "Who
// uses it and how"). Manifests are compared first: equal content digests
// (pipeline.Manifest.ContentDigest) mean equal bytes, and the rows are not
// read. Otherwise rows are matched by the table kind's key columns
// (schemas.Info.Key) and reported as added, removed or changed, with the
// changed columns and their old and new values.
package diff

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/spade-pipeline/spade/internal/textcut"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Status is the outcome of comparing one table version of two runs.
type Status string

// The statuses of a TableDiff.
const (
	// StatusEqual: both committed with the same content digest.
	StatusEqual Status = "equal"
	// StatusDifferent: both committed, different rows.
	StatusDifferent Status = "different"
	// StatusOnlyA / StatusOnlyB: committed in one run only.
	StatusOnlyA Status = "only_in_a"
	StatusOnlyB Status = "only_in_b"
	// StatusSchema: the two versions have different schema fingerprints,
	// so their rows cannot be compared column by column.
	StatusSchema Status = "schema_changed"
)

// Change kinds of a RowChange.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// Defaults of Options.
const (
	// DefaultMaxRows is how many row changes a TableDiff lists (the counts
	// are always complete).
	DefaultMaxRows = 20
	// DefaultMaxValueBytes caps each printed value (bytes of its JSON form).
	DefaultMaxValueBytes = 120
)

// Side names one run in one store.
type Side struct {
	// Store holds the run.
	Store storage.Store
	// Run is the run's name.
	Run string
}

// Options selects what Runs compares and how much detail it keeps.
type Options struct {
	// Tables lists the table names to compare (e.g. every stage output);
	// readers never list directories, so the caller names the tables.
	Tables []string
	// Rounds limits the comparison to these rounds; nil means every round
	// from 0 to the first unsealed round of either run.
	Rounds []int
	// MaxRows bounds RowChange entries per table (0: DefaultMaxRows;
	// negative: no limit).
	MaxRows int
	// MaxValueBytes bounds each printed value, in bytes of its JSON form,
	// before the "…(N bytes)" marker a cut value gets (<= 0:
	// DefaultMaxValueBytes).
	MaxValueBytes int
}

func (o Options) maxRows() int {
	switch {
	case o.MaxRows == 0:
		return DefaultMaxRows
	case o.MaxRows < 0:
		return math.MaxInt
	}
	return o.MaxRows
}

func (o Options) maxValue() int {
	if o.MaxValueBytes <= 0 {
		return DefaultMaxValueBytes
	}
	return o.MaxValueBytes
}

// Cell is one column value of a row key, formatted as JSON.
type Cell struct {
	// Column is the key column's Parquet name, or "(duplicate key
	// occurrence)" for the occurrence number of a repeated key.
	Column string `json:"column"`
	// Value is the value's JSON, truncated to Options.MaxValueBytes.
	Value string `json:"value"`
}

// ColumnChange is one changed column of a row: old (run A) and new (run B)
// values as JSON, truncated to Options.MaxValueBytes.
type ColumnChange struct {
	// Column is the changed column's Parquet name.
	Column string `json:"column"`
	// Old is run A's value; when both values are long and share a prefix,
	// both start a little before the first difference, marked with
	// "(N bytes)…".
	Old string `json:"old"`
	// New is run B's value, cut the same way as Old.
	New string `json:"new"`
}

// RowChange is one added, removed or changed row, identified by its key.
type RowChange struct {
	// Change is Added, Removed or Changed.
	Change string `json:"change"`
	// Key holds the row's key columns (schemas.Info.Key order).
	Key []Cell `json:"key"`
	// Columns lists the changed columns of a Changed row, in column order
	// (empty for added and removed rows).
	Columns []ColumnChange `json:"columns,omitempty"`
}

// TableDiff is the comparison of one (round, table) of two runs.
type TableDiff struct {
	// Round is the round compared.
	Round int `json:"round"`
	// Table is the table's name.
	Table string `json:"table"`
	// Status is the outcome (StatusEqual, StatusDifferent, ...).
	Status Status `json:"status"`
	// DigestA is run A's content digest ("" when not committed in A).
	DigestA string `json:"digest_a,omitempty"`
	// DigestB is run B's content digest ("" when not committed in B).
	DigestB string `json:"digest_b,omitempty"`
	// RowsA is run A's row count, from its manifest (0 when not committed).
	RowsA int64 `json:"rows_a"`
	// RowsB is run B's row count, from its manifest (0 when not committed).
	RowsB int64 `json:"rows_b"`
	// Added, Removed and Changed count rows by key (complete counts). A
	// table only in B counts all its rows as Added.
	Added int `json:"added"`
	// Removed counts rows of A without a match in B; a table only in A
	// counts all its rows.
	Removed int `json:"removed"`
	// Changed counts rows whose key matched but whose columns differ.
	Changed int `json:"changed"`
	// ChangedColumns is the sorted union of the columns that changed.
	ChangedColumns []string `json:"changed_columns,omitempty"`
	// Rows lists the first changes in key order; Truncated says more exist.
	Rows []RowChange `json:"rows,omitempty"`
	// Truncated is true when more changes exist than Rows lists
	// (Options.MaxRows).
	Truncated bool `json:"truncated,omitempty"`
	// Note explains a schema change or a content-digest difference with no
	// row difference (e.g. the same rows split into other part files).
	Note string `json:"note,omitempty"`
}

// Equal reports whether the table is the same in both runs.
func (t *TableDiff) Equal() bool { return t.Status == StatusEqual }

// Report is the comparison of two runs.
type Report struct {
	// A is run A's name.
	A string `json:"a"`
	// B is run B's name.
	B string `json:"b"`
	// Rounds are the rounds compared, in order.
	Rounds []int `json:"rounds"`
	// Tables holds one entry per (round, table) committed in either run,
	// in round then table-name order.
	Tables []TableDiff `json:"tables"`
	// Equal is true when every compared table is equal.
	Equal bool `json:"equal"`
	// Config lists the pinned settings whose values differ between the
	// runs' _RUN.json (operational settings, left out of the digest, are
	// not compared), in key order. It is information: Equal, and so the
	// exit code of spade diff, is about the tables only, since two runs
	// of different configs can hold the same data (a setting that a
	// round never reads).
	Config []Setting `json:"config"`
}

// Setting is one setting that differs between two runs' configs.
type Setting struct {
	// Key is the dotted setting name (config.Keys).
	Key string `json:"key"`
	// A is run A's value as JSON text (config.Config.Get).
	A string `json:"a"`
	// B is run B's value.
	B string `json:"b"`
}

// ConfigDiff lists the settings whose pinned values differ between a and
// b, in config.Keys order: what spade diff prints first, so an ablation's
// run compared with the default run shows the switch it flips.
func ConfigDiff(a, b config.Config) []Setting {
	out := []Setting{}
	pa, pb := a.WithDefaults().Pinned().WithDefaults(), b.WithDefaults().Pinned().WithDefaults()
	for _, k := range config.Keys() {
		if va, vb := pa.Get(k), pb.Get(k); va != vb {
			out = append(out, Setting{Key: k, A: va, B: vb})
		}
	}
	return out
}

// Runs compares every table of opts.Tables at every selected round of runs
// a and b, in round then table order. Both runs must exist
// (pipeline.ErrNotCommitted otherwise). A table committed in neither run
// at a round is left out. A round given in opts.Rounds at which neither
// run has any table is an error wrapping pipeline.ErrNotCommitted (a
// mistyped round must not compare as equal); without opts.Rounds, the
// first unsealed round is compared, and listed in Report.Rounds, only
// when either run has a table there.
func Runs(ctx context.Context, a, b Side, opts Options) (*Report, error) {
	var cfgs [2]config.Config
	for i, s := range []Side{a, b} {
		rf, err := pipeline.ReadRunFile(ctx, s.Store, s.Run)
		if err != nil {
			return nil, err
		}
		cfgs[i] = rf.Config
	}
	rounds, explicit := opts.Rounds, opts.Rounds != nil
	if rounds == nil {
		na, err := pipeline.NextRound(ctx, a.Store, a.Run)
		if err != nil {
			return nil, err
		}
		nb, err := pipeline.NextRound(ctx, b.Store, b.Run)
		if err != nil {
			return nil, err
		}
		for r := 0; r <= max(na, nb); r++ {
			rounds = append(rounds, r)
		}
	}
	tables := slices.Clone(opts.Tables)
	slices.Sort(tables)
	tables = slices.Compact(tables)
	rep := &Report{A: a.Run, B: b.Run, Rounds: []int{}, Tables: []TableDiff{}, Equal: true, Config: ConfigDiff(cfgs[0], cfgs[1])}
	for _, r := range rounds {
		found := false
		for _, t := range tables {
			ma, err := readOptional(ctx, a.Store, pipeline.ManifestKey(a.Run, r, t))
			if err != nil {
				return nil, err
			}
			mb, err := readOptional(ctx, b.Store, pipeline.ManifestKey(b.Run, r, t))
			if err != nil {
				return nil, err
			}
			if ma == nil && mb == nil {
				continue
			}
			found = true
			td, err := Tables(ctx, a.Store, ma, b.Store, mb, opts)
			if err != nil {
				return nil, err
			}
			td.Round, td.Table = r, t
			if !td.Equal() {
				rep.Equal = false
			}
			rep.Tables = append(rep.Tables, *td)
		}
		switch {
		case found:
			rep.Rounds = append(rep.Rounds, r)
		case explicit:
			who := fmt.Sprintf("neither run %s nor run %s has a", a.Run, b.Run)
			if a.Run == b.Run && a.Store.URL() == b.Store.URL() {
				who = fmt.Sprintf("run %s has no", a.Run)
			}
			return nil, fmt.Errorf("round %d: %s committed table %s: %w", r, who, roundTablesText(tables), pipeline.ErrNotCommitted)
		}
	}
	return rep, nil
}

// roundTablesText ends the "no committed table" message: "T there" for
// one table, "there" for several.
func roundTablesText(tables []string) string {
	if len(tables) == 1 {
		return tables[0] + " there"
	}
	return "there"
}

func readOptional(ctx context.Context, s storage.Store, key string) (*pipeline.Manifest, error) {
	m, err := pipeline.ReadManifest(ctx, s, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	return m, err
}

// Tables compares two versions of one table; either manifest may be nil
// (not committed). Equal content digests short-circuit without reading
// rows. Errors come from reading or verifying the files (ErrIntegrity) or
// an unknown table kind.
func Tables(ctx context.Context, a storage.Store, ma *pipeline.Manifest, b storage.Store, mb *pipeline.Manifest, opts Options) (*TableDiff, error) {
	td := &TableDiff{}
	if ma != nil {
		td.Round, td.Table, td.DigestA, td.RowsA = ma.Round, ma.Table, ma.ContentDigest(), ma.Rows
	}
	if mb != nil {
		td.Round, td.Table, td.DigestB, td.RowsB = mb.Round, mb.Table, mb.ContentDigest(), mb.Rows
	}
	switch {
	case ma == nil && mb == nil:
		td.Status = StatusEqual
		return td, nil
	case mb == nil:
		td.Status, td.Removed = StatusOnlyA, int(ma.Rows)
		return td, nil
	case ma == nil:
		td.Status, td.Added = StatusOnlyB, int(mb.Rows)
		return td, nil
	case td.DigestA == td.DigestB:
		td.Status = StatusEqual
		return td, nil
	case ma.SchemaFingerprint != mb.SchemaFingerprint || ma.Kind != mb.Kind:
		td.Status = StatusSchema
		td.Note = fmt.Sprintf("kind/schema %s %.12s -> %s %.12s", ma.Kind, ma.SchemaFingerprint, mb.Kind, mb.SchemaFingerprint)
		return td, nil
	}
	td.Status = StatusDifferent
	if err := rowDiff(ctx, a, ma, b, mb, opts, td); err != nil {
		return nil, err
	}
	if td.Added+td.Removed+td.Changed == 0 {
		td.Note = "same rows by key and value, stored in different part files or order"
	}
	return td, nil
}

// keyed is one row with its key, as read from run A.
type keyed struct {
	key  []reflect.Value
	occ  int
	row  reflect.Value
	seen bool
}

func rowDiff(ctx context.Context, a storage.Store, ma *pipeline.Manifest, b storage.Store, mb *pipeline.Manifest, opts Options, td *TableDiff) error {
	info, err := infoOf(ma)
	if err != nil {
		return err
	}
	cols := columnsOf(info.RowType)
	byName := map[string]int{}
	for _, c := range cols {
		byName[c.name] = c.field
	}
	keyFields := make([]int, len(info.Key))
	for i, k := range info.Key {
		f, ok := byName[k]
		if !ok {
			return fmt.Errorf("table kind %s: key column %q is not a column of %s", info.Name, k, info.RowType)
		}
		keyFields[i] = f
	}
	keyOf := func(row reflect.Value) []reflect.Value {
		out := make([]reflect.Value, len(keyFields))
		for i, f := range keyFields {
			out[i] = row.Elem().Field(f)
		}
		return out
	}
	// Rows of A by key; a key seen n times before gets occurrence n, so a
	// table with duplicate keys still pairs rows one to one.
	rowsA := map[string]*keyed{}
	occA := map[string]int{}
	err = ReadRows(ctx, a, ma, func(row reflect.Value) error {
		k := keyOf(row)
		ks := keyString(k)
		n := occA[ks]
		occA[ks] = n + 1
		rowsA[fmt.Sprintf("%s#%d", ks, n)] = &keyed{key: k, occ: n, row: row}
		return nil
	})
	if err != nil {
		return err
	}
	var changes []*change
	changedCols := map[string]bool{}
	occB := map[string]int{}
	err = ReadRows(ctx, b, mb, func(row reflect.Value) error {
		k := keyOf(row)
		ks := keyString(k)
		n := occB[ks]
		occB[ks] = n + 1
		old, ok := rowsA[fmt.Sprintf("%s#%d", ks, n)]
		if !ok {
			td.Added++
			changes = append(changes, &change{kind: Added, key: k, occ: n})
			return nil
		}
		old.seen = true
		var diffs []int
		for i, c := range cols {
			if !sameValue(old.row.Elem().Field(c.field), row.Elem().Field(c.field)) {
				diffs = append(diffs, i)
			}
		}
		if len(diffs) == 0 {
			return nil
		}
		td.Changed++
		ch := &change{kind: Changed, key: k, occ: n}
		for _, i := range diffs {
			c := cols[i]
			changedCols[c.name] = true
			o, n := formatPair(old.row.Elem().Field(c.field), row.Elem().Field(c.field), opts.maxValue())
			ch.cols = append(ch.cols, ColumnChange{Column: c.name, Old: o, New: n})
		}
		changes = append(changes, ch)
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range rowsA {
		if !r.seen {
			td.Removed++
			changes = append(changes, &change{kind: Removed, key: r.key, occ: r.occ})
		}
	}
	slices.SortFunc(changes, func(x, y *change) int {
		for i := range x.key {
			if c := compareValues(x.key[i], y.key[i]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(x.occ, y.occ), strings.Compare(x.kind, y.kind))
	})
	limit := opts.maxRows()
	for i, ch := range changes {
		if i >= limit {
			td.Truncated = true
			break
		}
		rc := RowChange{Change: ch.kind, Columns: ch.cols}
		for j, k := range info.Key {
			rc.Key = append(rc.Key, Cell{Column: k, Value: format(ch.key[j], opts.maxValue())})
		}
		if ch.occ > 0 {
			rc.Key = append(rc.Key, Cell{Column: "(duplicate key occurrence)", Value: fmt.Sprint(ch.occ)})
		}
		td.Rows = append(td.Rows, rc)
	}
	for c := range changedCols {
		td.ChangedColumns = append(td.ChangedColumns, c)
	}
	slices.Sort(td.ChangedColumns)
	return nil
}

type change struct {
	kind string
	key  []reflect.Value
	occ  int
	cols []ColumnChange
}

// keyString encodes key values unambiguously (JSON array) for map lookup.
func keyString(k []reflect.Value) string {
	vals := make([]any, len(k))
	for i, v := range k {
		vals[i] = v.Interface()
	}
	b, err := json.Marshal(vals)
	if err != nil {
		return fmt.Sprintf("%#v", vals)
	}
	return string(b)
}

// sameValue compares two column values; NaN equals NaN, since a cell that
// is NaN in both runs did not change.
func sameValue(a, b reflect.Value) bool {
	if reflect.DeepEqual(a.Interface(), b.Interface()) {
		return true
	}
	return fmt.Sprintf("%#v", a.Interface()) == fmt.Sprintf("%#v", b.Interface())
}

// compareValues orders key values: numbers numerically, strings and
// everything else by their formatted text.
func compareValues(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp.Compare(a.Int(), b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return cmp.Compare(a.Uint(), b.Uint())
	case reflect.Float32, reflect.Float64:
		return cmp.Compare(a.Float(), b.Float())
	case reflect.Bool:
		return cmp.Compare(boolInt(a.Bool()), boolInt(b.Bool()))
	case reflect.String:
		return strings.Compare(a.String(), b.String())
	}
	return strings.Compare(fmt.Sprint(a.Interface()), fmt.Sprint(b.Interface()))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// format renders a value as JSON (NaN and other values JSON cannot hold
// with fmt), cut to at most max bytes on a rune boundary.
func format(v reflect.Value, max int) string {
	var s string
	if b, err := json.Marshal(v.Interface()); err == nil {
		s = string(b)
	} else {
		s = fmt.Sprint(v.Interface())
	}
	return truncate(s, max)
}

// formatPair renders an old and a new value. When both are long and share
// a prefix, both are shown from a little before their first difference,
// so a change deep inside a long text is visible after truncation.
func formatPair(a, b reflect.Value, max int) (string, string) {
	sa, sb := format(a, math.MaxInt), format(b, math.MaxInt)
	if len(sa) <= max && len(sb) <= max {
		return sa, sb
	}
	d := 0
	for d < len(sa) && d < len(sb) && sa[d] == sb[d] {
		d++
	}
	const context = 16
	if d <= max-context {
		return truncate(sa, max), truncate(sb, max)
	}
	start := len(textcut.Prefix(sa, d-context)) // at a character boundary
	return window(sa, start, max), window(sb, start, max)
}

// window shows s from byte start, marking the cut prefix with its length.
func window(s string, start, max int) string {
	rest := s[start:]
	out := fmt.Sprintf("(%d bytes)…", start)
	if len(rest) <= max {
		return out + rest
	}
	return out + truncate(rest, max)
}

func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", textcut.Prefix(s, max), len(s))
}
