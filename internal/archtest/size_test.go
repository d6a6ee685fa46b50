package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The limits of TestSizes.
const (
	maxFileLines = 800 // lines of a .go or .py file
	maxFuncLines = 120 // lines of a function, from its func/def line to its end
)

// sizeAllowList holds today's offenders, one per line: "FILE LINES" for a
// file over maxFileLines, "FILE:FUNC LINES" for a function over
// maxFuncLines (FUNC is Name, Recv.Name for a Go method, Class.name for a
// Python method). An entry lets that file or function stay up to LINES
// lines: it may shrink, not grow. Shrink it as files are split; an entry
// no longer over its limit fails the test, so the list stays exact.
// TestImportJSONL, TestBadInput, TestLoadErrors and TestCompute are one
// table of cases and a short loop (the limit's "table-driven data").
// Regenerate it with
//
//	go test ./internal/archtest -run TestSizes -v -args -archtest.print-sizes
//
// Four entries are debts, not old code: newEvalCmd, ops_test.go,
// TestEvalLeaseAndSideFiles and test_sampled.py grew past the
// limits in the 2026-12-08 merges (eval lease and side records, the
// trainer's turn samples) and are to be split.
const sizeAllowList = `
cmd/spade/cmd_eval.go:newEvalCmd 128
cmd/spade/eval_test.go:TestEvalStage 157
cmd/spade/integrity_test.go:gcRace 126
cmd/spade/ops_test.go 824
cmd/spade/pool_cli_test.go:TestPoolImportFixedPoolCLI 187
cmd/spade/side_files_test.go:TestEvalLeaseAndSideFiles 149
datasets/import_test.go:TestImportJSONL 199
internal/faults/badinput_test.go:TestBadInput 138
pipeline/config/config_test.go:TestLoadErrors 125
stages/label/label_test.go:TestCompute 123
trainer/tests/test_sampled.py 847
`

var printSizes = flag.Bool("archtest.print-sizes", false, "TestSizes: print today's offenders as a sizeAllowList")

// generatedRe is the Go convention for generated files (also honoured in
// Python with # for //).
var generatedRe = regexp.MustCompile(`(?m)^(?://|#) Code generated .* DO NOT EDIT\.$`)

// size is one measured file or function.
type size struct {
	key   string // FILE or FILE:FUNC
	lines int
}

// TestSizes checks that no tracked, non-generated .go or .py file is over
// maxFileLines lines and no function in one over maxFuncLines, except the
// offenders of sizeAllowList, each up to its recorded size.
//
// How it counts: a file's lines are its newline-separated lines (a last
// line without a newline counts). A Go function is every *ast.FuncDecl of
// go/parser, from the line of `func` to the line of its closing brace
// (a doc comment not included; function literals count toward the
// function holding them). A Python function is every def and async def,
// methods and nested functions included, from its def line to its
// end_lineno, as python3's ast module reports them (decorators not
// included); a file python3 cannot parse is measured by lines only.
// Generated files carry "Code generated ... DO NOT EDIT." and are skipped.
func TestSizes(t *testing.T) {
	root := repoRoot(t)
	var files, pyFiles []string
	for _, f := range trackedFiles(t, root) {
		if ext := path.Ext(f); ext == ".go" || ext == ".py" {
			files = append(files, f)
		}
	}
	var offenders []size
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		if generatedRe.Match(b) {
			continue
		}
		if n := countLines(b); n > maxFileLines {
			offenders = append(offenders, size{f, n})
		}
		if path.Ext(f) == ".py" {
			pyFiles = append(pyFiles, f)
			continue
		}
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f, b, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Type.Func).Line + 1
			if n > maxFuncLines {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = receiverName(fd.Recv.List[0].Type) + "." + name
				}
				offenders = append(offenders, size{f + ":" + name, n})
			}
		}
	}
	for _, s := range pythonFuncSizes(t, root, pyFiles) {
		if s.lines > maxFuncLines {
			offenders = append(offenders, s)
		}
	}
	sort.Slice(offenders, func(i, j int) bool { return offenders[i].key < offenders[j].key })
	t.Logf("measured %d .go and .py files (limits: %d lines a file, %d a function)", len(files), maxFileLines, maxFuncLines)

	if *printSizes {
		var b strings.Builder
		for _, o := range offenders {
			fmt.Fprintf(&b, "%s %d\n", o.key, o.lines)
		}
		t.Logf("const sizeAllowList = `\n%s`", b.String())
	}

	allowed := parseAllowList(t, sizeAllowList)
	seen := map[string]bool{}
	for _, o := range offenders {
		seen[o.key] = true
		limit, ok := allowed[o.key]
		what := "file"
		maxLines := maxFileLines
		if strings.Contains(o.key, ":") {
			what, maxLines = "function", maxFuncLines
		}
		switch {
		case !ok:
			t.Errorf("%s: %s of %d lines, over the limit of %d: split it (or, for code that predates this test, add it to sizeAllowList)", o.key, what, o.lines, maxLines)
		case o.lines > limit:
			t.Errorf("%s: %s of %d lines, grown past the %d lines sizeAllowList allows it: split it rather than raise the entry", o.key, what, o.lines, limit)
		default:
			t.Logf("allowed: %s %s of %d lines (entry %d)", o.key, what, o.lines, limit)
		}
	}
	var stale []string
	for k := range allowed {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		t.Errorf("sizeAllowList: %s is no longer over its limit (or is gone): delete its entry", k)
	}
}

// countLines counts b's lines: newlines, plus a last line without one.
func countLines(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// parseAllowList reads sizeAllowList.
func parseAllowList(t *testing.T, s string) map[string]int {
	t.Helper()
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err != nil {
			t.Fatalf("sizeAllowList: %q is not \"KEY LINES\"", line)
		}
		out[k] = n
	}
	return out
}

// pyFuncSizes is the python3 program behind pythonFuncSizes: it reads
// file names (one a line) on stdin and prints one JSON object per def.
const pyFuncSizes = `
import ast, json, sys
for name in sys.stdin.read().split("\n"):
    if not name:
        continue
    try:
        with open(name, "rb") as f:
            tree = ast.parse(f.read(), name)
    except (SyntaxError, ValueError) as e:
        print(json.dumps({"file": name, "error": str(e)}))
        continue
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                print(json.dumps({"file": name, "func": qual, "lines": child.end_lineno - child.lineno + 1}))
                walk(child, qual + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)
    walk(tree, "")
`

// pythonFuncSizes measures the functions of the Python files with
// python3's ast module. Without python3 on PATH it measures nothing and
// says so: the file limit still holds.
func pythonFuncSizes(t *testing.T, root string, files []string) []size {
	t.Helper()
	if len(files) == 0 {
		return nil
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Logf("no python3 on PATH: Python functions not measured")
		return nil
	}
	cmd := exec.Command(py, "-c", pyFuncSizes)
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(strings.Join(files, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 ast sizes: %v\n%s", err, stderr.Bytes())
	}
	var sizes []size
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			File, Func, Error string
			Lines             int
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("python3 ast sizes: %v in %q", err, sc.Text())
		}
		if r.Error != "" {
			t.Logf("%s: not parsed by python3 (%s): measured by lines only", r.File, r.Error)
			continue
		}
		sizes = append(sizes, size{r.File + ":" + r.Func, r.Lines})
	}
	return sizes
}
