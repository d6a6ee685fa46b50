package report

import (
	"bytes"
	"fmt"
	"html/template"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
)

// markdown converts the metric definitions (Header.MetricsDoc, GitHub
// Markdown with tables) to HTML: CommonMark plus the table and
// strikethrough extensions, no autolinks (the page links only within
// itself), raw HTML left out (goldmark's default: a "raw HTML omitted"
// comment), headings given ids prefixed "doc-" so they never clash with
// the page's own.
var markdown = goldmark.New(
	goldmark.WithExtensions(extension.Table, extension.Strikethrough),
	goldmark.WithParserOptions(parser.WithAutoHeadingID()),
)

// docIDs prefixes every generated heading id with "doc-".
type docIDs struct{ parser.IDs }

// Generate implements parser.IDs.
func (d docIDs) Generate(value []byte, kind ast.NodeKind) []byte {
	return append([]byte("doc-"), d.IDs.Generate(value, kind)...)
}

// metricsHTML renders md as HTML for the end of the page; "" for "".
// Errors: goldmark's (it fails only on a failing writer, never on text).
func metricsHTML(md string) (template.HTML, error) {
	if md == "" {
		return "", nil
	}
	var b bytes.Buffer
	ctx := parser.NewContext(parser.WithIDs(docIDs{parser.NewContext().IDs()}))
	if err := markdown.Convert([]byte(md), &b, parser.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("metric definitions: %w", err)
	}
	return template.HTML(b.String()), nil //nolint:gosec // goldmark escapes text and omits raw HTML
}

// roundsText is the page's opening sentence about the rounds shown, true
// for every kind of run: it is built from the rounds' own Regeneration
// flags (k = 1: every round regenerates, none is marked; k > 1: some do,
// marked; design.mode fixed_pool: none ever does), names k only when
// h.RegenerateEvery is set, and speaks of two populations and of regret
// on regeneration rounds only when both kinds of round are shown.
func roundsText(h Header, rounds []RoundSummary) string {
	n := len(rounds)
	if n == 0 {
		return "No rounds yet."
	}
	regen := 0
	for _, r := range rounds {
		if r.Regeneration {
			regen++
		}
	}
	span := fmt.Sprintf("%d rounds (%d to %d)", n, rounds[0].Round, rounds[n-1].Round)
	if n == 1 {
		span = fmt.Sprintf("1 round (%d)", rounds[0].Round)
	}
	const noRegret = " No round has regret: it needs the hinted plays, which only a regeneration round makes."
	switch {
	case regen == 0 && h.FixedPool:
		return span + ", none with regeneration: under design.mode fixed_pool no round designs environments; every round plays the pool imported at round 0 (spade pool import)." + noRegret
	case regen == 0:
		return span + ", none with regeneration: every round shown plays the pool carried forward." + noRegret
	case regen == n:
		every := ""
		if h.RegenerateEvery == 1 {
			every = " (regenerate_every 1)"
		}
		if n == 1 {
			return span + ", with regeneration" + every + ": it designs, plays and labels its own environments, with regret from its hinted plays."
		}
		return span + ", every one with regeneration" + every + ": each designs, plays and labels its own environments, with regret from its hinted plays."
	}
	every := ""
	if h.RegenerateEvery > 1 {
		every = fmt.Sprintf(" (every %d rounds)", h.RegenerateEvery)
	}
	return fmt.Sprintf("%s, %d with regeneration%s, marked by dashed vertical lines. A regeneration round plays the environments it designed; "+
		"the other rounds play the pool carried forward (only environments admitted inside the band), so win rate and learnable fraction "+
		"are drawn per population. Regret exists on regeneration rounds only (the hinted plays).", span, regen, every)
}
