package sandbox

import (
	"os/exec"
	"testing"
)

// TestPythonUnitTests runs the spade_env and harness unit tests with the interpreter
// the sandbox uses.
func TestPythonUnitTests(t *testing.T) {
	cmd := exec.Command("/usr/bin/python3", "-S", "-B", "-m", "unittest", "-v", "test_spade_env", "test_spade_harness")
	cmd.Dir = "python"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests failed: %v\n%s", err, out)
	}
}
