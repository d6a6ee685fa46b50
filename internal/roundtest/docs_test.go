package roundtest

import (
	"encoding/csv"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/schemas"
)

// sqlBlock matches a fenced ```sql block of a Markdown file.
var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// TestCookbook runs every ```sql block of docs/cookbook.md with `spade
// sql` against the 8-round procedural run: each must succeed and return
// rows, unless the text before it says it "may return no rows".
func TestCookbook(t *testing.T) {
	f := procedural(t)
	doc, err := os.ReadFile("../../docs/cookbook.md")
	require.NoError(t, err)
	text := string(doc)
	idx := sqlBlock.FindAllStringSubmatchIndex(text, -1)
	require.GreaterOrEqual(t, len(idx), 8, "the cookbook must hold the analyst's queries")
	prev := 0
	for i, m := range idx {
		query := text[m[2]:m[3]]
		// The prose between the previous block and this one.
		intro := text[prev:m[0]]
		prev = m[1]
		mayBeEmpty := strings.Contains(intro, "may return no rows")
		heading := lastHeading(text[:m[0]])
		t.Run(heading+"/"+string(rune('a'+i)), func(t *testing.T) {
			out := spade(t, f.root, "--store", "file://"+f.root, "--run", f.run, "sql", "--format", "csv", query)
			recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			require.NoError(t, err, "output of\n%s", query)
			require.NotEmpty(t, recs, "no header")
			if !mayBeEmpty {
				require.Greater(t, len(recs), 1, "query returned no rows:\n%s", query)
			}
			t.Logf("%d rows", len(recs)-1)
		})
	}
}

func lastHeading(text string) string {
	i := strings.LastIndex(text, "\n## ")
	if i < 0 {
		return "intro"
	}
	h := text[i+4:]
	if j := strings.IndexByte(h, '\n'); j >= 0 {
		h = h[:j]
	}
	return h
}

// TestTablesDoc checks docs/tables.md against the schemas: every table
// has a section, every column (nested struct fields included) is named in
// it, and every column the section names exists.
func TestTablesDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/tables.md")
	require.NoError(t, err)
	sections := map[string]string{}
	for _, s := range strings.Split(string(doc), "\n## ")[1:] {
		heading, body, _ := strings.Cut(s, "\n")
		name, _, _ := strings.Cut(heading, ":")
		sections[strings.TrimSpace(name)] = body
	}
	for _, info := range schemas.All() {
		t.Run(info.Name, func(t *testing.T) {
			body, ok := sections[info.Name]
			require.True(t, ok, "docs/tables.md has no section \"## %s\"", info.Name)
			documented := firstCellNames(body)
			for _, col := range columns(info.RowType) {
				require.Contains(t, documented, col.name, "column %s of table %s is not documented", col.name, info.Name)
				for _, sub := range col.fields {
					require.Contains(t, body, sub, "field %s.%s of table %s is not documented", col.name, sub, info.Name)
				}
			}
			have := map[string]bool{}
			for _, c := range columns(info.RowType) {
				have[c.name] = true
			}
			for name := range documented {
				require.True(t, have[name], "docs/tables.md documents column %s, which table %s does not have", name, info.Name)
			}
			for _, k := range info.Key {
				require.True(t, have[k], "key column %s", k)
				require.Contains(t, body[:strings.Index(body, "|")], "`"+k+"`", "the key %s of %s must be named above its column table", k, info.Name)
			}
		})
	}
	for _, name := range tableNames() {
		require.Contains(t, string(doc), "`"+name+"`", "table %s written by a stage is not in docs/tables.md", name)
	}
}

type column struct {
	name string
	// fields are the struct fields of a list-of-struct column.
	fields []string
}

// columns lists a row type's Parquet columns from its struct tags.
func columns(rt reflect.Type) []column {
	var out []column
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		tag := f.Tag.Get("parquet")
		if tag == "" || tag == "-" {
			continue
		}
		c := column{name: strings.Split(tag, ",")[0]}
		if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			for _, sub := range columns(f.Type.Elem()) {
				c.fields = append(c.fields, sub.name)
			}
		}
		out = append(out, c)
	}
	return out
}

var backticked = regexp.MustCompile("`([a-z0-9_]+)`")

// firstCellNames returns the backticked names in the first cell of each
// Markdown table row of a section ("| `a`, `b` | ... |").
func firstCellNames(body string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			out[m[1]] = true
		}
	}
	return out
}
