// Package docs embeds the user documentation that the binary shows itself:
// spade report includes docs/metrics.md at the end of every report, so the
// report's links to the definitions work offline, years later.
package docs

import _ "embed"

// Metrics is the text of docs/metrics.md (Markdown), the definitions of
// every round metric the report plots.
//
//go:embed metrics.md
var Metrics string
