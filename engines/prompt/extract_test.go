package prompt

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envCode = "from spade_env import Env\n\n\nclass Lights(Env):\n    name = \"lights\"\n\n    def reset(self, seed=None):\n        super().reset(seed)\n        return \"Valid actions: on | off\", {}\n"

func TestExtractCode(t *testing.T) {
	helper := "def helper(x):\n    return x * 2\n"
	cases := []struct {
		name     string
		response string
		want     string
	}{
		{"python fence", "Here you go:\n```python\n" + envCode + "```\nEnjoy.", envCode},
		{"py fence", "```py\n" + envCode + "```", envCode},
		{"untagged fence", "```\n" + envCode + "```", envCode},
		{"uppercase tag with attrs", "```Python title=env.py\n" + envCode + "```", envCode},
		{"tilde fence", "~~~python\n" + envCode + "~~~\n", envCode},
		{"longer fence holds backticks", "````python\n" + envCode + "x = '```'\n````\n", envCode + "x = '```'\n"},
		{"prose around", "I designed a lights puzzle.\n\n```python\n" + envCode + "```\n\nThe agent must toggle lights.\n", envCode},
		{"env block wins over longer helper", "```python\n" + strings.Repeat(helper, 10) + "```\nand\n```python\n" + envCode + "```", envCode},
		{"longest python block without env", "```python\n" + helper + "```\n```python\n" + helper + helper + "```", helper + helper},
		{"bash block ignored", "```bash\npip install nothing\n```\n```python\n" + envCode + "```", envCode},
		{"unterminated fence", "Sure:\n```python\n" + envCode + "    def step(self, action):\n        return", envCode + "    def step(self, action):\n        return\n"},
		{"no fences raw code", envCode, envCode},
		{"no fences leading prose", "Here is the environment:\n\n" + envCode, envCode},
		{"crlf", strings.ReplaceAll("```python\n"+envCode+"```\n", "\n", "\r\n"), envCode},
		{"trailing spaces and blank lines", "```python\n\n\n" + strings.ReplaceAll(envCode, "\n", "   \n") + "\n\n```", envCode},
		{"indented fence", "1. Code:\n   ```python\n   " + strings.ReplaceAll(strings.TrimSuffix(envCode, "\n"), "\n", "\n   ") + "\n   ```\n", envCode},
		{"env class in other-tag block", "```text\n" + envCode + "```", envCode},
		{"qualified base", "```python\nimport spade_env\n\nclass T(spade_env.ToolUseEnv):\n    pass\n```\n```python\n" + helper + helper + helper + "```", "import spade_env\n\nclass T(spade_env.ToolUseEnv):\n    pass\n"},
		{"bom", "\ufeffimport random\nx = 1\n", "import random\nx = 1\n"},
		{"inline code is not a fence", "Use ```python``` fences.\nimport os\n", "import os\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractCode(tc.response)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestExtractCodeNoCode(t *testing.T) {
	for _, resp := range []string{
		"",
		"   \n\n",
		"I cannot design that environment.",
		"```json\n{\"a\": 1}\n```",
		"```python\n\n```",
		"Important: the class of problems is hard.\nFrom the document, we import ideas.",
	} {
		_, err := ExtractCode(resp)
		assert.ErrorIs(t, err, ErrNoCode, "response %q", resp)
	}
}

func TestNormalizeSourceAndEnvID(t *testing.T) {
	a := "\n\nimport os  \r\nx = 1\t\r\n\r\n\r\n"
	b := "import os\nx = 1"
	assert.Equal(t, "import os\nx = 1\n", NormalizeSource(a))
	assert.Equal(t, NormalizeSource(a), NormalizeSource(NormalizeSource(a)))
	assert.Equal(t, "", NormalizeSource(" \n\t\n"))
	assert.Equal(t, EnvID(a), EnvID(b))
	assert.Len(t, EnvID(b), 16)
	assert.NotEqual(t, EnvID(b), EnvID("import os\nx = 2"))
	// Pinned: env ids are stored in tables; changing the rule breaks joins.
	assert.Equal(t, "2be6a23f2c2c6b3f", EnvID(b))
}

// FuzzExtractCode checks, for any response: no panic; a result is
// normalised, made only of (dedented, right-trimmed) pieces of input
// lines; and re-extracting a result that starts with a Python line and
// holds no fence gives the same result.
func FuzzExtractCode(f *testing.F) {
	for _, s := range []string{
		"```python\n" + envCode + "```",
		"Sure!\n" + envCode,
		"```py\nx = 1\n```\n```python\nclass A(Env):\n  pass\n```",
		"```python\nimport os\n",
		"~~~\ndef f():\n  return 1\n~~~",
		"no code here",
		"\r\n```\r\nimport x\r\n```\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, response string) {
		code, err := ExtractCode(response)
		if err != nil {
			if !errors.Is(err, ErrNoCode) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if code == "" {
			t.Fatal("empty code without error")
		}
		if NormalizeSource(code) != code {
			t.Fatalf("result not normalised: %q", code)
		}
		input := strings.ReplaceAll(strings.ReplaceAll(strings.TrimPrefix(response, "\ufeff"), "\r\n", "\n"), "\r", "\n")
		for _, line := range strings.Split(strings.TrimSuffix(code, "\n"), "\n") {
			if !strings.Contains(input, line) {
				t.Fatalf("output line %q is not from the input", line)
			}
		}
		first := strings.SplitN(code, "\n", 2)[0]
		hasFence := false
		for _, l := range strings.Split(code, "\n") {
			if c, n := fenceRun(strings.TrimLeft(l, " \t")); c != 0 && n >= 3 {
				hasFence = true
			}
		}
		if codeStartRE.MatchString(first) && !hasFence {
			again, err := ExtractCode(code)
			if err != nil || again != code {
				t.Fatalf("not idempotent: %q -> %q (%v)", code, again, err)
			}
		}
	})
}
