package datasets

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEmbedded(t *testing.T) {
	docs, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 60 {
		t.Errorf("%d embedded docs, want >= 60", len(docs))
	}
	perDomain := map[string]int{}
	titles := map[string]string{}
	for i, d := range docs {
		if err := checkDoc(d); err != nil {
			t.Errorf("%s: %v", d.DocID, err)
		}
		if i > 0 && docs[i-1].DocID >= d.DocID {
			t.Errorf("not sorted by DocID at %d: %s, %s", i, docs[i-1].DocID, d.DocID)
		}
		perDomain[d.Domain]++
		if prev, ok := titles[d.Title]; ok {
			t.Errorf("title %q used by %s and %s", d.Title, prev, d.DocID)
		}
		titles[d.Title] = d.DocID
		if n := len(strings.Fields(d.Text)); n < 150 || n > 700 {
			t.Errorf("%s: %d words, want 150-700", d.DocID, n)
		}
		if !utf8.ValidString(d.Text) || d.Source != EmbeddedSource || d.License != "CC0-1.0" {
			t.Errorf("%s: source %q license %q", d.DocID, d.Source, d.License)
		}
		// The file name is the id, so a reader of the tree finds a doc by id.
		if !strings.HasPrefix(d.Text, "# "+d.Title+"\n") {
			t.Errorf("%s: text does not start with its title heading", d.DocID)
		}
	}
	for _, dom := range EmbeddedDomains {
		if perDomain[dom] < 8 {
			t.Errorf("domain %s has %d docs, want >= 8", dom, perDomain[dom])
		}
	}
	// Deterministic: a second call returns the same documents.
	again, err := Embedded()
	if err != nil || !slices.Equal(docs, again) {
		t.Fatal("second call to Embedded differs")
	}
}
