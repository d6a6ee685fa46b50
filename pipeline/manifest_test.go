package pipeline

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckSealedManifestsNamesRoundAndTable: a manifest whose digest the
// seal records but that says another table (copied from one) or round is
// refused, as the chain check refuses it; a missing one is named.
func TestCheckSealedManifestsNamesRoundAndTable(t *testing.T) {
	m := &Manifest{FormatVersion: FormatVersion, Run: "r", Round: 1, Table: "designs"}
	seal := &Seal{Round: 1, Tables: map[string]string{"hints": m.ContentDigest()}}
	err := CheckSealedManifests("r", seal, map[string]*Manifest{"hints": m})
	if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "it says round 1, table designs") {
		t.Fatalf("copied manifest: %v", err)
	}
	m.Table = "hints"
	seal.Tables["hints"] = m.ContentDigest()
	if err := CheckSealedManifests("r", seal, map[string]*Manifest{"hints": m}); err != nil {
		t.Fatalf("matching manifest: %v", err)
	}
	err = CheckSealedManifests("r", seal, map[string]*Manifest{})
	if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "is missing") {
		t.Fatalf("missing manifest: %v", err)
	}
}
