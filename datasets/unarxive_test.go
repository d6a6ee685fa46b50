package datasets

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spade-pipeline/spade/internal/testutil/shareddata"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// unarxiveSample is the unarXive sample the repository ships
// (datasets/testdata/unarxive-sample); its absence fails the test.
func unarxiveSample(t *testing.T) string {
	t.Helper()
	return shareddata.Path(t, "datasets/unarxive-sample/arXiv_src_2212_086.jsonl.gz")
}

// unarxiveOptions is the documented import of the unarXive sample (see
// docs/corpus.md).
func unarxiveOptions(p string) ImportOptions {
	return ImportOptions{
		Paths:       []string{p},
		IDPath:      "paper_id",
		TitlePath:   "metadata.title",
		LicensePath: "metadata.license",
		DomainPath:  "discipline",
		TextPaths:   []string{"abstract.text", "body_text[].text"},
	}
}

func TestImportUnarXive(t *testing.T) {
	p := unarxiveSample(t)
	docs, rep, err := collect(t, unarxiveOptions(p))
	if err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, docs, rep)
	if len(docs) != 49 || rep.Read != 49 || rep.Skipped != 0 || rep.Duplicates != 0 {
		t.Fatalf("got %d docs, report %+v", len(docs), rep)
	}
	// Line 37 had "\n<email>" scrubbed into "\user@example.org": an invalid
	// JSON escape that the repair keeps as literal text.
	if rep.Repaired != 1 || rep.Repairs[0].Line != 37 {
		t.Errorf("repairs %v, want line 37 only", rep.Repairs)
	}

	// The same file with the abstract only, to compare lengths.
	abstractOnly := unarxiveOptions(p)
	abstractOnly.TextPaths = []string{"abstract.text"}
	abstracts, _, err := collect(t, abstractOnly)
	if err != nil || len(abstracts) != 49 {
		t.Fatalf("abstract-only import: %d docs, %v", len(abstracts), err)
	}
	abs := map[string]int{}
	maxAbstract := 0
	for _, d := range abstracts {
		abs[d.DocID] = len(d.Text)
		maxAbstract = max(maxAbstract, len(d.Text))
	}

	titles, ids := map[string]bool{}, map[string]bool{}
	minLen, minID, secondMin := 1<<62, "", 1<<62
	total, totalAbs := 0, 0
	for _, d := range docs {
		titles[d.Title] = true
		ids[d.DocID] = true
		if d.Title == "" || d.Domain == "" || !strings.HasPrefix(d.License, "http://creativecommons.org/") || d.Source != "arXiv_src_2212_086.jsonl.gz" {
			t.Errorf("doc %s: title %q domain %q license %q source %q", d.DocID, d.Title, d.Domain, d.License, d.Source)
		}
		n := len(d.Text)
		if n < abs[d.DocID] {
			t.Errorf("doc %s: full text %d bytes shorter than its abstract %d", d.DocID, n, abs[d.DocID])
		}
		total += n
		totalAbs += abs[d.DocID]
		switch {
		case n < minLen:
			secondMin, minLen, minID = minLen, n, d.DocID
		case n < secondMin:
			secondMin = n
		}
	}
	if len(titles) != 49 || len(ids) != 49 {
		t.Errorf("%d distinct titles, %d distinct ids; want 49 each", len(titles), len(ids))
	}
	t.Logf("text bytes: total %d (abstracts %d), min %d (%s), second %d, longest abstract %d", total, totalAbs, minLen, minID, secondMin, maxAbstract)
	// Measured on the sample: 2212.11739's body_text in the source holds
	// only two LaTeX-preamble fragments, so its text is the abstract plus
	// 88 bytes; every other paper's text is at least 7,509 bytes, more than
	// three times the longest abstract (1,915 bytes), and all texts
	// together are ~60 times the abstracts (3,078,566 vs 51,678 bytes).
	if minLen != 1238 || minID != "2212.11739" {
		t.Errorf("shortest text %d bytes (%s), want 1238 (2212.11739)", minLen, minID)
	}
	if secondMin != 7509 || secondMin < 3*maxAbstract {
		t.Errorf("second-shortest text %d bytes, want 7509 and > 3 x the longest abstract (%d)", secondMin, maxAbstract)
	}
	if total != 3078566 || total < 50*totalAbs {
		t.Errorf("total text %d bytes, want 3078566 and > 50 x the abstracts' %d", total, totalAbs)
	}

	// Golden listing: id, sha256, bytes and title of each doc, in emit order.
	var b strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&b, "%s\t%s\t%d\t%s\t%s\n", d.DocID, d.SHA256, len(d.Text), d.Domain, strings.Join(strings.Fields(d.Title), " "))
	}
	golden := filepath.Join("testdata", "unarxive_import.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if b.String() != string(want) {
		t.Errorf("import differs from %s; rerun with -update if intended\ngot:\n%s", golden, b.String())
	}
}
