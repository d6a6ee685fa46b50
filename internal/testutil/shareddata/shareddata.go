// Package shareddata finds the real data sets the tests read. The unarXive
// sample (49 real arXiv papers, CC BY-SA 4.0, see
// datasets/testdata/unarxive-sample/README.md) ships with the repository,
// so a clone anywhere runs every test; a shared/ folder beside the
// checkout is still looked at for data sets that do not ship.
package shareddata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shipped maps a data set's path under shared/ to its copy in the
// repository (relative to the module root).
var shipped = map[string]string{
	"datasets/unarxive-sample/": "datasets/testdata/unarxive-sample/",
}

// Path returns the path of rel (a path under shared/, such as
// "datasets/unarxive-sample/arXiv_src_2212_086.jsonl.gz"): the
// repository's own copy when the data set ships (found by walking up from
// the test's working directory to the module root, the folder holding
// go.mod), else the file under the nearest shared/ folder above the
// working directory. It fails t, naming both places, when neither exists.
func Path(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	var tried []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			for from, to := range shipped {
				if rest, ok := strings.CutPrefix(rel, from); ok {
					p := filepath.Join(d, to, rest)
					if _, err := os.Stat(p); err == nil {
						return p
					}
					tried = append(tried, p)
				}
			}
		}
		p := filepath.Join(d, "shared", rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if filepath.Dir(d) == d {
			t.Fatalf("%s not found (looked for %s and shared/%s above %s)", rel, strings.Join(tried, ", "), rel, dir)
		}
	}
}
