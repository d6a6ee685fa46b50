package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/spade-pipeline/spade"

// listedPackage is the part of `go list -json` the layer rules read.
type listedPackage struct {
	ImportPath   string
	Dir          string
	Name         string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// rel is the package's path inside the module ("" for the module root).
func (p listedPackage) rel() string {
	return strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
}

// listPackages runs `go list -e -json ./...` at the repository root.
func listPackages(t *testing.T, root string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -e -json ./...: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list ./... listed no package")
	}
	return pkgs
}

// under reports whether module-relative path p is dir or inside it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// projectImports returns the module-relative paths of the project
// packages p's own code imports and, separately, those its in-package
// tests add. External test packages (package x_test) are left out on
// purpose: they are the package's users, and may run a whole round
// through stages/all (docs/design.md "Layers").
func projectImports(p listedPackage) (code, tests []string) {
	pick := func(list []string) []string {
		var out []string
		for _, imp := range list {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				out = append(out, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		return out
	}
	return pick(p.Imports), pick(p.TestImports)
}

// TestLayers checks the import rules of docs/design.md "Layers" on the
// graph `go list -e -json ./...` prints: imports of each package's own
// code and of its in-package tests.
func TestLayers(t *testing.T) {
	root := repoRoot(t)
	pkgs := listPackages(t, root)
	// rules: a package under `from` imports nothing under any of `not`.
	rules := []struct {
		from []string
		not  []string
		why  string
	}{
		{[]string{"engines", "pipeline", "schemas", "datasets", "trainer", "docs"}, []string{"stages", "cmd"},
			"only stages/all and cmd sit above the stages"},
		{[]string{"pipeline", "schemas"}, []string{"engines"},
			"the data-moving layer knows nothing of the engines"},
		{[]string{"schemas"}, []string{"pipeline", "datasets"},
			"schemas is the bottom layer"},
		{[]string{"datasets"}, []string{"pipeline", "engines"},
			"datasets sits beside pipeline and imports only schemas"},
		{[]string{"trainer", "docs"}, []string{"schemas", "pipeline", "engines", "datasets", "internal"},
			"trainer and docs are leaves: embedded files only"},
	}
	checked := 0
	for _, p := range pkgs {
		from := p.rel()
		code, tests := projectImports(p)
		check := func(imp, kind string) {
			checked++
			if under(from, "stages") && !under(from, "stages/all") && under(imp, "stages") && !under(imp, from) {
				t.Errorf("%s: %s imports stage %s: what two stages share belongs in engines/, and only stages/all names the stages", from, kind, imp)
			}
			for _, r := range rules {
				for _, f := range r.from {
					if !under(from, f) {
						continue
					}
					for _, n := range r.not {
						if under(imp, n) {
							t.Errorf("%s: %s imports %s (%s)", from, kind, imp, r.why)
						}
					}
				}
			}
		}
		for _, imp := range code {
			check(imp, "code")
		}
		for _, imp := range tests {
			check(imp, "in-package test")
		}
	}
	t.Logf("checked %d project imports of %d packages", checked, len(pkgs))
}

// stageMethods are the methods of pipeline.Stage.
var stageMethods = []string{"Name", "Outputs", "Plan", "ConfigSubset", "Parts", "Run"}

// TestStagesAreStages checks that every package directly under stages/
// (but all) defines a stage: a type with every method of pipeline.Stage
// (a cheap check by go/ast of the package's own files, by method name,
// with Name returning string), and that stages/all imports each of them.
func TestStagesAreStages(t *testing.T) {
	root := repoRoot(t)
	pkgs := listPackages(t, root)
	var allImports []string
	var stagePkgs []listedPackage
	for _, p := range pkgs {
		r := p.rel()
		switch {
		case r == "stages/all":
			allImports, _ = projectImports(p)
		case strings.HasPrefix(r, "stages/") && strings.Count(r, "/") == 1:
			stagePkgs = append(stagePkgs, p)
		}
	}
	if len(stagePkgs) == 0 {
		t.Fatal("no package under stages/")
	}
	for _, p := range stagePkgs {
		types := stageTypes(t, p)
		if len(types) == 0 {
			t.Errorf("%s: no type with the methods of pipeline.Stage (%s); a package under stages/ holds a stage, anything else belongs in engines/", p.rel(), strings.Join(stageMethods, ", "))
			continue
		}
		t.Logf("%s: stage types %s", p.rel(), strings.Join(types, ", "))
		if !contains(allImports, p.rel()) {
			t.Errorf("%s: stages/all does not import it, so no run includes its stage", p.rel())
		}
	}
}

// stageTypes returns the types of package p whose method sets (value or
// pointer receiver) name every method of pipeline.Stage.
func stageTypes(t *testing.T, p listedPackage) []string {
	t.Helper()
	methods := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			recv := receiverName(fd.Recv.List[0].Type)
			if fd.Name.Name == "Name" && !returnsString(fd.Type) {
				continue
			}
			if methods[recv] == nil {
				methods[recv] = map[string]bool{}
			}
			methods[recv][fd.Name.Name] = true
		}
	}
	var out []string
	for recv, m := range methods {
		ok := true
		for _, want := range stageMethods {
			ok = ok && m[want]
		}
		if ok {
			out = append(out, recv)
		}
	}
	sort.Strings(out)
	return out
}

func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func returnsString(ft *ast.FuncType) bool {
	if ft.Results == nil || len(ft.Results.List) != 1 {
		return false
	}
	id, ok := ft.Results.List[0].Type.(*ast.Ident)
	return ok && id.Name == "string"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
