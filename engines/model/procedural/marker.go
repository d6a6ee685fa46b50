package procedural

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// markerVersion is the version of the SPADE_PROCEDURAL line format.
const markerVersion = 1

// markerPrefix starts the machine-readable line every generated source
// carries; the hint writer reads the family's solution from it instead of
// executing the source.
const markerPrefix = "SPADE_PROCEDURAL = "

// marker is the SPADE_PROCEDURAL value.
type marker struct {
	Family     string `json:"family"`
	Difficulty int    `json:"difficulty"`
	Version    int    `json:"version"`
	Params     Params `json:"params"`
}

// ErrNoMarker means a source carries no SPADE_PROCEDURAL line: it was not
// designed by this backend.
var ErrNoMarker = errors.New("procedural: no SPADE_PROCEDURAL marker")

// parseMarker finds and decodes the SPADE_PROCEDURAL line of an environment
// source. Errors: ErrNoMarker when absent; a wrapped decode error naming the
// line number when present but malformed or of an unknown family/version.
func parseMarker(source string) (marker, error) {
	for i, line := range strings.Split(source, "\n") {
		line = strings.TrimRight(line, "\r")
		if !strings.HasPrefix(line, markerPrefix) {
			continue
		}
		var m marker
		if err := json.Unmarshal([]byte(line[len(markerPrefix):]), &m); err != nil {
			return marker{}, fmt.Errorf("line %d: SPADE_PROCEDURAL: %w", i+1, err)
		}
		if m.Version != markerVersion {
			return marker{}, fmt.Errorf("line %d: SPADE_PROCEDURAL version %d, want %d", i+1, m.Version, markerVersion)
		}
		if _, ok := familyByName(m.Family); !ok {
			return marker{}, fmt.Errorf("line %d: SPADE_PROCEDURAL: unknown family %q", i+1, m.Family)
		}
		if m.Params == nil {
			return marker{}, fmt.Errorf("line %d: SPADE_PROCEDURAL: no params", i+1)
		}
		return m, nil
	}
	return marker{}, ErrNoMarker
}

// FamilyOf reports the family and difficulty (1..5) of a source this
// backend designed, so the memory stage can fill MemoryEntry.Family and
// Difficulty; ok is false for any other source.
func FamilyOf(source string) (family string, difficulty int, ok bool) {
	m, err := parseMarker(source)
	if err != nil {
		return "", 0, false
	}
	return m.Family, m.Difficulty, true
}
