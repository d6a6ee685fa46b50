// Package pyenv locates the project's pinned Python virtual environment
// (requirements.txt at the repository root, created by `make venv` at a
// fixed path so that every clone on a machine shares one install) for the
// tests and benchmarks that need real Python libraries: torch,
// transformers, the OpenAI-compatible server of `transformers serve`.
//
// The sandbox's stdlib-only interpreter (/usr/bin/python3) is a different
// thing and is not found here (docs/sandbox.md).
package pyenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// DefaultVenv is the directory `make venv` creates when SPADE_VENV is not
// set: outside any home directory and any checkout, so that a fresh clone
// (CI's) reuses the machine's install of several GB instead of repeating it.
const DefaultVenv = "/opt/spade/venv"

// DefaultCache is the directory where `make models` writes the test models
// converted from the packages that ship them (SPADE_CACHE overrides it).
const DefaultCache = "/opt/spade/cache"

// Venv returns the virtual environment directory: $SPADE_VENV, else
// DefaultVenv.
func Venv() string {
	if v := strings.TrimSpace(os.Getenv("SPADE_VENV")); v != "" {
		return v
	}
	return DefaultVenv
}

// Cache returns the model cache directory: $SPADE_CACHE, else DefaultCache.
func Cache() string {
	if v := strings.TrimSpace(os.Getenv("SPADE_CACHE")); v != "" {
		return v
	}
	return DefaultCache
}

// Python returns the path of the virtual environment's interpreter
// (Venv()/bin/python); it may not exist.
func Python() string { return filepath.Join(Venv(), "bin", "python") }

// Require returns Python() when it exists and imports every module named;
// otherwise it fails the test when the CI variable is set (CI must have run
// `make venv`, so a missing environment is a broken install, never a reason
// to pass) and skips it elsewhere, naming the command that installs it.
func Require(t testing.TB, modules ...string) string {
	t.Helper()
	py := Python()
	if _, err := os.Stat(py); err != nil {
		missing(t, "no virtual environment at "+Venv()+" (run `make venv`)")
		return ""
	}
	if len(modules) > 0 {
		code := "import " + strings.Join(modules, ", ")
		if out, err := exec.Command(py, "-c", code).CombinedOutput(); err != nil {
			missing(t, py+" cannot "+code+" (run `make venv`): "+err.Error()+"\n"+string(out))
			return ""
		}
	}
	return py
}

// RequireModel returns the directory of a converted test model under
// Cache()/models/NAME (a Hugging Face checkpoint directory written by
// `make models`), failing under CI and skipping elsewhere when it is absent.
func RequireModel(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(Cache(), "models", name)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		missing(t, "no test model at "+dir+" (run `make models`)")
		return ""
	}
	return dir
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// DefaultAirflowVenv is the directory `make airflow-venv` creates when
// SPADE_AIRFLOW_VENV is not set: Airflow 3 and its pinned dependencies
// (requirements-airflow.txt), apart from Venv() because their versions
// clash with requirements.txt's (docs/operations.md "Airflow").
const DefaultAirflowVenv = "/opt/spade/airflow-venv"

// AirflowVenv returns $SPADE_AIRFLOW_VENV, else DefaultAirflowVenv.
func AirflowVenv() string {
	if v := strings.TrimSpace(os.Getenv("SPADE_AIRFLOW_VENV")); v != "" {
		return v
	}
	return DefaultAirflowVenv
}

// RequireAirflow returns the interpreter of AirflowVenv() when it exists
// and imports airflow; otherwise it fails the test under CI and skips it
// elsewhere, naming `make airflow-venv`.
func RequireAirflow(t testing.TB) string {
	t.Helper()
	py := filepath.Join(AirflowVenv(), "bin", "python")
	if _, err := os.Stat(py); err != nil {
		missing(t, "no Airflow environment at "+AirflowVenv()+" (run `make airflow-venv`)")
		return ""
	}
	if out, err := exec.Command(py, "-c", "import airflow").CombinedOutput(); err != nil {
		missing(t, py+" cannot import airflow (run `make airflow-venv`): "+err.Error()+"\n"+string(out))
		return ""
	}
	return py
}
