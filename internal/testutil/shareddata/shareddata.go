// Package shareddata finds the project's shared inputs for tests: the folder
// shared/ that sits beside the repository checkout (the real data sets of
// ../shared/datasets, which are not part of the module).
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Path returns the path of rel under the nearest shared/ folder above the
// test's working directory (the package directory under go test). It fails
// t when no such file exists.
func Path(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "shared", rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if filepath.Dir(d) == d {
			t.Fatalf("shared/%s not found above %s", rel, dir)
		}
	}
}
