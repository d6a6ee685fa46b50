package archtest

import (
	"bufio"
	"bytes"
	"go/scanner"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestRefs checks every reference to a document in the tracked text files
// (Go, Python, YAML, Markdown, shell, Makefiles): the document exists in
// the repository and, where the reference cites a heading or a step
// (docs/design.md "Stages and their DAG", docs/method.md step 6), the
// document has it. It fails naming file:line of each broken reference.
//
// What counts as a reference:
//   - a path with a docs/ component ending in .md (docs/format.md,
//     ../../docs/tables.md), resolved from the repository root, else from
//     the citing file's directory;
//   - a bare upper-case name such as README.md, beside the citing file or
//     at the root;
//   - in Markdown, a link target ending in .md, from the file's directory.
//
// What follows a reference may cite a part of it: a quoted heading (with
// an optional comma before it), which must be a heading of the document,
// or the bold lead-in of one of its paragraphs or list items ("**Round
// seal.** ..."), or the start of either up to a word boundary; and "step N" or "steps N-M",
// whose numbers must each have a "Step N" heading. A citation may run over
// a line break inside a comment: lines are joined with their comment
// markers removed before matching.
//
// Not references: words inside URLs, and, in _test.go files, string
// literals (fixtures name made-up files); their comments are checked.
func TestRefs(t *testing.T) {
	root := repoRoot(t)
	files := trackedFiles(t, root)
	exists := map[string]bool{}
	for _, f := range files {
		exists[f] = true
	}
	docs := map[string]*docIndex{}
	index := func(p string) *docIndex {
		if d, ok := docs[p]; ok {
			return d
		}
		d := indexDoc(t, filepath.Join(root, filepath.FromSlash(p)))
		docs[p] = d
		return d
	}
	var problems []string
	checked := 0
	for _, f := range files {
		if !scanned(f) {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range findRefs(f, text) {
			checked++
			target, ok := resolveRef(f, r.path, r.link, exists)
			if !ok {
				if why, allowed := allowedMissing[r.path]; allowed && why != "" {
					continue
				}
				problems = append(problems, f+":"+strconv.Itoa(r.line)+": "+r.path+" does not exist in the repository")
				continue
			}
			d := index(target)
			if r.heading != "" && !d.hasHeading(r.heading) {
				problems = append(problems, f+":"+strconv.Itoa(r.line)+": "+target+" has no heading "+strconv.Quote(r.heading))
			}
			for _, n := range r.steps {
				if !d.steps[n] {
					problems = append(problems, f+":"+strconv.Itoa(r.line)+": "+target+" has no step "+strconv.Itoa(n)+` (a heading "Step `+strconv.Itoa(n)+`: ...")`)
				}
			}
		}
	}
	t.Logf("checked %d references to documents in %d tracked files", checked, len(files))
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// allowedMissing lists references to documents that are not in the
// repository on purpose, with the reason. It is empty: add an entry only
// for a document a command writes at run time (Makefile's
// .cache/bench/bench.md is not matched as a reference at all: it has no
// docs/ component and is not an upper-case name).
var allowedMissing = map[string]string{}

// scanned reports whether file f is a text file whose references are
// checked.
func scanned(f string) bool {
	switch path.Ext(f) {
	case ".go", ".py", ".yaml", ".yml", ".md", ".sh":
		return true
	}
	return path.Base(f) == "Makefile"
}

// ref is one reference found in a file.
type ref struct {
	line    int    // 1-based line of the reference's start
	path    string // as written
	link    bool   // a Markdown link target (relative to the file's directory)
	heading string // the quoted heading cited, or ""
	steps   []int  // the steps cited
}

var (
	// A path ending in .md with a docs/ component, or a bare upper-case name.
	docPathRe = regexp.MustCompile(`(?:^|[^\w./-])((?:\.\./)*(?:[\w.-]+/)*docs/(?:[\w.-]+/)*[\w.-]+\.md|[A-Z][A-Z0-9_-]*\.md)\b`)
	// A Markdown link target ending in .md (an optional #anchor after it).
	mdLinkRe = regexp.MustCompile(`\]\(([^)\s#]+\.md)(?:#[^)\s]*)?\)`)
	// What may follow a reference: a quoted heading, or steps.
	headingRe = regexp.MustCompile(`^[ \t]*,?[ \t]*"([^"\n]{1,160})"`)
	stepsRe   = regexp.MustCompile(`^[ \t]*,?[ \t]*steps?[ \t]+(\d+)(?:[ \t]*(?:-|–|to|and)[ \t]*(\d+))?\b`)
)

// findRefs returns the references in file f's text.
func findRefs(f string, text []byte) []ref {
	s := joinLines(f, text)
	var out []ref
	for _, m := range docPathRe.FindAllStringSubmatchIndex(s.text, -1) {
		start, end := m[2], m[3]
		if inURL(s.text, start) {
			continue
		}
		out = append(out, citation(s, start, end))
	}
	if path.Ext(f) == ".md" {
		for _, m := range mdLinkRe.FindAllStringSubmatchIndex(s.text, -1) {
			start, end := m[2], m[3]
			p := s.text[start:end]
			if strings.Contains(p, "://") || strings.HasPrefix(p, "mailto:") {
				continue
			}
			out = append(out, ref{line: s.lineAt(start), path: p, link: true})
		}
	}
	return out
}

// citation builds the ref of the reference at s.text[start:end] with the
// heading or steps that follow it.
func citation(s joined, start, end int) ref {
	r := ref{line: s.lineAt(start), path: s.text[start:end]}
	rest := s.text[end:]
	if m := headingRe.FindStringSubmatch(rest); m != nil {
		r.heading = m[1]
	} else if m := stepsRe.FindStringSubmatch(rest); m != nil {
		a, _ := strconv.Atoi(m[1])
		b := a
		if m[2] != "" {
			b, _ = strconv.Atoi(m[2])
		}
		for n := a; n <= b && n-a < 100; n++ {
			r.steps = append(r.steps, n)
		}
	}
	return r
}

// inURL reports whether the word around text[i] is part of a URL.
func inURL(text string, i int) bool {
	j := strings.LastIndexAny(text[:i], " \t\n(<\"'`")
	word := text[j+1 : i]
	return strings.Contains(word, "://") || strings.HasPrefix(word, "www.")
}

// resolveRef returns the repository path file f's reference p names.
func resolveRef(f, p string, link bool, exists map[string]bool) (string, bool) {
	local := path.Join(path.Dir(f), p)
	if link || strings.HasPrefix(p, "../") {
		return local, exists[local]
	}
	if exists[path.Clean(p)] {
		return path.Clean(p), true
	}
	return local, exists[local]
}

// joined is a file's text as one string in which a comment's lines are
// joined by single spaces, so that a citation broken over two comment
// lines reads as one; pos maps offsets back to lines.
type joined struct {
	text  string
	start []int // start[i]: offset in text where line lines[i] begins
	lines []int // the 1-based source line of each piece
}

func (s joined) lineAt(off int) int {
	i := sort.SearchInts(s.start, off+1) - 1
	if i < 0 {
		return 1
	}
	return s.lines[i]
}

// commentMarker is what a continued line may begin with: indentation, and
// the comment marker of Go, Python, YAML, shell and Makefiles, or a
// Markdown quote.
var commentMarker = regexp.MustCompile(`^[ \t]*(?://+|#+|\*|>)?[ \t]*`)

// joinLines joins file f's lines. In _test.go files only the comments are
// kept (as go/scanner finds them); string literals there are fixtures.
// Two pieces are joined by a space when they are on consecutive lines and
// by a newline otherwise (which no citation crosses).
func joinLines(f string, text []byte) joined {
	var s joined
	var b strings.Builder
	prev := -1
	add := func(line int, piece string) {
		if piece == "" {
			return // a blank line (or an empty comment line) ends a citation
		}
		if prev >= 0 {
			if line == prev+1 {
				b.WriteByte(' ')
			} else {
				b.WriteByte('\n')
			}
		}
		s.start = append(s.start, b.Len())
		s.lines = append(s.lines, line)
		b.WriteString(piece)
		prev = line
	}
	strip := func(l string) string { return strings.TrimRight(commentMarker.ReplaceAllString(l, ""), " \t\r") }
	if strings.HasSuffix(f, "_test.go") {
		fset := token.NewFileSet()
		file := fset.AddFile(f, -1, len(text))
		var sc scanner.Scanner
		sc.Init(file, text, nil, scanner.ScanComments)
		for {
			pos, tok, lit := sc.Scan()
			if tok == token.EOF {
				break
			}
			if tok != token.COMMENT {
				continue
			}
			line := fset.Position(pos).Line
			lit = strings.TrimSuffix(strings.TrimPrefix(lit, "/*"), "*/")
			for i, l := range strings.Split(lit, "\n") {
				add(line+i, strip(l))
			}
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(text))
		sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		for n := 1; sc.Scan(); n++ {
			add(n, strip(sc.Text()))
		}
	}
	s.text = b.String()
	return s
}

// docIndex is what a Markdown document offers to cite: its headings and
// the bold lead-ins of its paragraphs and list items (normalised), and its
// step numbers.
type docIndex struct {
	headings []string
	steps    map[int]bool
}

var (
	mdHeadingRe = regexp.MustCompile(`^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	// A paragraph or list item that opens with a bold lead-in, which the
	// docs cite like a heading (docs/sandbox.md "Episodes").
	boldLeadRe = regexp.MustCompile(`^[ \t]*(?:[*+-][ \t]+|\d+\.[ \t]+)?\*\*([^*]+?)[.:]?\*\*`)
	stepHeadRe = regexp.MustCompile(`^step[ \t]+(\d+)\b[:.]?[ \t]*`)
	spacesRe   = regexp.MustCompile(`\s+`)
)

// normHeading lower-cases h, drops Markdown emphasis and code marks and
// collapses white space.
func normHeading(h string) string {
	h = strings.NewReplacer("`", "", "*", "", "_", " ").Replace(h)
	return strings.ToLower(strings.TrimSpace(spacesRe.ReplaceAllString(h, " ")))
}

// indexDoc reads the headings of the document at p, outside fenced code
// blocks. A file that is not Markdown has none.
func indexDoc(t *testing.T, p string) *docIndex {
	t.Helper()
	d := &docIndex{steps: map[int]bool{}}
	if filepath.Ext(p) != ".md" {
		return d
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fence := ""
	for _, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			switch {
			case fence == "":
				fence = trimmed[:3]
			case strings.HasPrefix(trimmed, fence):
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		m := mdHeadingRe.FindStringSubmatch(l)
		if m == nil {
			if b := boldLeadRe.FindStringSubmatch(l); b != nil {
				d.headings = append(d.headings, normHeading(b[1]))
			}
			continue
		}
		h := normHeading(m[1])
		d.headings = append(d.headings, h)
		if sm := stepHeadRe.FindStringSubmatch(h); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			d.steps[n] = true
			// "Step 1: Corpus sampling" may also be cited by its title.
			d.headings = append(d.headings, h[len(sm[0]):])
		}
	}
	return d
}

// hasHeading reports whether cited is a heading of d, or the start of one
// that ends there at a word boundary ("The policy of a round" cites "The
// policy of a round, and who serves it").
func (d *docIndex) hasHeading(cited string) bool {
	c := normHeading(cited)
	if c == "" {
		return false
	}
	for _, h := range d.headings {
		if h == c {
			return true
		}
		if strings.HasPrefix(h, c) {
			next := h[len(c)]
			if !(next >= 'a' && next <= 'z' || next >= '0' && next <= '9') {
				return true
			}
		}
	}
	return false
}

// TestRefsParser pins what findRefs reads as a reference and what it cites.
func TestRefsParser(t *testing.T) {
	for _, tc := range []struct {
		name, file, text string
		want             []ref
	}{
		{"heading over a comment break", "a.go", "// see (docs/design.md \"The\n// policy of a round\") here\n",
			[]ref{{line: 1, path: "docs/design.md", heading: "The policy of a round"}}},
		{"steps", "a.py", "# docs/method.md steps 1-3: x\n",
			[]ref{{line: 1, path: "docs/method.md", steps: []int{1, 2, 3}}}},
		{"comma heading", "a.yaml", "k: 1 # docs/method.md, \"Learnable band\"\n",
			[]ref{{line: 1, path: "docs/method.md", heading: "Learnable band"}}},
		{"bare name", "Makefile", "# spade: see README.md.\n", []ref{{line: 1, path: "README.md"}}},
		{"url", "a.md", "at https://example.com/docs/x.md and www.x.org/README.md\n", nil},
		{"markdown link", "docs/a.md", "[t](tables.md#x) [u](https://h/y.md)\n",
			[]ref{{line: 1, path: "tables.md", link: true}}},
		{"test fixture string", "a_test.go", "package a\n\nvar x = \"docs/x.md\" // and docs/y.md\n",
			[]ref{{line: 3, path: "docs/y.md"}}},
		{"no join across a gap", "a.go", "// docs/format.md\n\n// \"Layout\"\n", []ref{{line: 1, path: "docs/format.md"}}},
		{"lower-case bare names are not references", "a.go", "// writes bench.md and out.md\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := findRefs(tc.file, []byte(tc.text))
			if len(got) != len(tc.want) {
				t.Fatalf("findRefs = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.line != w.line || g.path != w.path || g.link != w.link || g.heading != w.heading || !equalInts(g.steps, w.steps) {
					t.Errorf("ref %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
	d := &docIndex{headings: []string{normHeading("The policy of a round, and who serves it"), normHeading("Stages and their DAG")}}
	for cited, want := range map[string]bool{"The policy of a round": true, "the  policy of a ROUND": true, "Stages": true, "Stag": false, "Engines": false} {
		if got := d.hasHeading(cited); got != want {
			t.Errorf("hasHeading(%q) = %v, want %v", cited, got, want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
