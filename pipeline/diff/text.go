package diff

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/spade-pipeline/spade/internal/termtext"
)

// WriteText writes the report for people: one line per table that differs
// (equal tables only when all is true), its listed row changes indented
// below, and a summary line. Output is deterministic for a given report.
// Values and keys from the tables are shown through termtext.Safe.
// Output is buffered; the only error is w's first write error, returned
// unwrapped by the final flush.
func (r *Report) WriteText(w io.Writer, all bool) error {
	bw := bufio.NewWriter(w)
	for _, c := range r.Config {
		fmt.Fprintf(bw, "config %s: %s -> %s\n", c.Key, termtext.Safe(c.A), termtext.Safe(c.B))
	}
	counts := map[Status]int{}
	for i := range r.Tables {
		t := &r.Tables[i]
		counts[t.Status]++
		if t.Equal() && !all {
			continue
		}
		fmt.Fprintf(bw, "round %d %s: %s", t.Round, t.Table, t.Status)
		switch t.Status {
		case StatusEqual:
			fmt.Fprintf(bw, " (%d rows, digest %.12s)", t.RowsA, t.DigestA)
		case StatusOnlyA:
			fmt.Fprintf(bw, " (%d rows, not committed in %s)", t.RowsA, r.B)
		case StatusOnlyB:
			fmt.Fprintf(bw, " (%d rows, not committed in %s)", t.RowsB, r.A)
		case StatusDifferent:
			fmt.Fprintf(bw, " (rows %d -> %d): %d added, %d removed, %d changed", t.RowsA, t.RowsB, t.Added, t.Removed, t.Changed)
			if len(t.ChangedColumns) > 0 {
				fmt.Fprintf(bw, "; columns: %s", strings.Join(t.ChangedColumns, ", "))
			}
		}
		if t.Note != "" {
			fmt.Fprintf(bw, " [%s]", termtext.Safe(t.Note)) // manifest kinds and fingerprints are file content
		}
		fmt.Fprintln(bw)
		for _, rc := range t.Rows {
			mark := map[string]string{Added: "+", Removed: "-", Changed: "~"}[rc.Change]
			keys := make([]string, len(rc.Key))
			for i, c := range rc.Key {
				keys[i] = c.Column + "=" + c.Value
			}
			fmt.Fprintf(bw, "  %s %s\n", mark, termtext.Safe(strings.Join(keys, " ")))
			for _, c := range rc.Columns {
				fmt.Fprintf(bw, "      %s: %s -> %s\n", c.Column, termtext.Safe(c.Old), termtext.Safe(c.New))
			}
		}
		if t.Truncated {
			fmt.Fprintf(bw, "  ... %d more changes (raise --max-rows)\n", t.Added+t.Removed+t.Changed-len(t.Rows))
		}
	}
	var parts []string
	for _, s := range []Status{StatusEqual, StatusDifferent, StatusSchema, StatusOnlyA, StatusOnlyB} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], strings.ReplaceAll(string(s), "_", " ")))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no tables committed")
	}
	verdict := "runs differ"
	if r.Equal {
		verdict = "runs are equal"
	}
	if n := len(r.Config); n > 0 {
		parts = append(parts, fmt.Sprintf("%d setting%s differ%s", n, map[bool]string{true: "s"}[n > 1], map[bool]string{false: "s"}[n > 1]))
	}
	fmt.Fprintf(bw, "%s vs %s: %s (%s)\n", r.A, r.B, verdict, strings.Join(parts, ", "))
	return bw.Flush()
}
