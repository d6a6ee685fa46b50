package pipeline

import (
	"strings"
	"testing"
)

// TestValidateRunName: run names are path components and shell words.
func TestValidateRunName(t *testing.T) {
	for _, ok := range []string{"default", "a", "run-2.b_c", strings.Repeat("x", MaxRunNameBytes)} {
		if err := ValidateRunName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"":                                     "not starting with",
		".hidden":                              "not starting with",
		"_x":                                   "not starting with",
		"-x":                                   "not starting with '.', '_' or '-'",
		"../x":                                 "not starting with",
		"a/b":                                  `character '/' not allowed`,
		"é":                                    "not allowed",
		strings.Repeat("y", MaxRunNameBytes+1): "129 bytes, at most 128",
	} {
		err := ValidateRunName(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.20q: error %v, want one containing %q", bad, err, want)
		}
	}
}
