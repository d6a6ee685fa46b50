package main

import (
	"strings"
	"testing"

	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
)

// TestReportHeaderRoles: the report's header says what answers each role
// and how it is served, one description when the roles agree and one per
// role when model.roles splits them.
func TestReportHeaderRoles(t *testing.T) {
	header := func(edit func(*config.Config)) report.Header {
		cfg := config.Default()
		edit(&cfg)
		return reportHeader(&pipeline.RunFile{Run: "r", Config: cfg}, report.Band{Low: 0.2, High: 0.8})
	}
	h := header(func(*config.Config) {})
	if !strings.HasPrefix(h.Model, "procedural (offline") || h.Serving != "none (no served model)" {
		t.Errorf("default: model %q serving %q", h.Model, h.Serving)
	}
	h = header(func(c *config.Config) {
		c.Model.Backend, c.Model.Name, c.Model.BaseURL = "openai", "Qwen/Qwen3-8B", "http://127.0.0.1:30000/v1"
	})
	if h.Model != "openai: Qwen/Qwen3-8B at http://127.0.0.1:30000/v1" || h.Serving != "fixed" {
		t.Errorf("one fixed server: model %q serving %q", h.Model, h.Serving)
	}
	h = header(func(c *config.Config) {
		c.Model.Backend, c.Model.Serving = "openai", "managed"
		c.Model.Roles.Designer.Backend, c.Model.Roles.Hint.Backend = "procedural", "procedural"
	})
	if h.Model != "designer: procedural; hint: procedural; agent: openai: each round's checkpoint, served by model.serve_command" || h.Serving != "agent: managed" {
		t.Errorf("managed agent, procedural designer and hint: model %q serving %q", h.Model, h.Serving)
	}
}
