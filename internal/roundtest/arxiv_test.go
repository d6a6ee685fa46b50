package roundtest

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/shareddata"
)

// TestUnarXiveRounds imports the unarXive sample with the CLI (as a user
// would, cmd/spade TestCorpusImportUnarXive), runs rounds 1..3 on it and
// checks that the environments are grounded on their documents: most
// sources use terms (capitalised words, numbers) of their own document,
// clearly more than of other documents, and no source names its
// document's title.
func TestUnarXiveRounds(t *testing.T) {
	ctx := context.Background()
	src := shareddata.Path(t, "datasets/unarxive-sample/arXiv_src_2212_086.jsonl.gz")
	cfgPath, err := filepath.Abs("testdata/arxiv.yaml")
	require.NoError(t, err)
	cfg, err := loadConfig("arxiv.yaml")
	require.NoError(t, err)
	f, err := newFixture(ctx, "arxiv", "arxiv", cfg)
	require.NoError(t, err)
	out := spade(t, f.root, "--store", "file://"+f.root, "--run", f.run, "--config", cfgPath,
		"corpus", "import", src, "--id", "paper_id", "--title", "metadata.title",
		"--text", "abstract.text", "--text", "body_text[].text", "--license", "metadata.license", "--domain", "discipline")
	require.Contains(t, out, "imported 49 documents")
	require.NoError(t, runRounds(ctx, f.store, f.run, cfg, 3))
	db, err := f.openSQL(ctx, f.run)
	require.NoError(t, err)
	defer db.Close()

	_, docs := rows(t, db, `SELECT doc_id, title, text FROM corpus ORDER BY doc_id`)
	require.Len(t, docs, 49)
	_, envs := rows(t, db, `
		SELECT e.env_id, e.source, c.doc_id, c.title
		FROM environments e JOIN corpus c ON list_contains(e.doc_ids, c.doc_id)
		ORDER BY e.env_id, c.doc_id`)
	require.NotEmpty(t, envs)
	require.EqualValues(t, count(t, db, `SELECT count(*) FROM environments`), len(envs),
		"every environment has exactly one grounding document in the corpus (docs_per_slot 1)")

	termsOf := map[string]map[string]bool{}
	for _, d := range docs {
		termsOf[d[0]] = docTerms(d[2])
	}
	grounded := 0
	var own, others float64
	for _, e := range envs {
		envID, source, docID, title := e[0], e[1], e[2], e[3]
		words := sourceWords(source)
		hits := overlap(termsOf[docID], words)
		if hits > 0 {
			grounded++
		}
		own += float64(hits)
		var sum float64
		for id, terms := range termsOf {
			if id != docID {
				sum += float64(overlap(terms, words))
			}
		}
		others += sum / float64(len(termsOf)-1)
		normTitle := strings.ToLower(strings.Join(strings.Fields(title), " "))
		require.NotEmpty(t, normTitle)
		require.NotContains(t, strings.ToLower(strings.Join(strings.Fields(source), " ")), normTitle,
			"environment %s names the title of its document %s", envID, docID)
	}
	t.Logf("%d of %d environments use terms of their document; mean terms used: own document %.2f, other documents %.2f",
		grounded, len(envs), own/float64(len(envs)), others/float64(len(envs)))
	require.GreaterOrEqual(t, 3*grounded, 2*len(envs), "most environments must use terms of their grounding document")
	require.Greater(t, own, 2*others, "sources must use their own document's terms clearly more than other documents'")

	// Three rounds, one regeneration: the pool of rounds 2 and 3 is round 1's.
	require.EqualValues(t, 3, count(t, db, `SELECT count(DISTINCT round) FROM labels`))
	require.Zero(t, count(t, db, `
		SELECT count(*) FROM (SELECT env_id FROM pool WHERE round = 3 EXCEPT SELECT env_id FROM pool WHERE round = 1)`))
}

var (
	capitalised = regexp.MustCompile(`\b[A-Z][A-Za-z]{3,}\b`)
	number      = regexp.MustCompile(`\b[0-9]{2,}\b`)
	word        = regexp.MustCompile(`[A-Za-z0-9]+`)
)

// docTerms returns a document's candidate grounding terms: capitalised
// words of four letters or more and numbers of two digits or more.
func docTerms(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range capitalised.FindAllString(text, -1) {
		out[w] = true
	}
	for _, n := range number.FindAllString(text, -1) {
		out[n] = true
	}
	return out
}

// sourceWords returns the alphanumeric words of a source (identifiers are
// split on underscores and punctuation).
func sourceWords(source string) map[string]bool {
	out := map[string]bool{}
	for _, w := range word.FindAllString(source, -1) {
		out[w] = true
	}
	return out
}

func overlap(terms, words map[string]bool) int {
	n := 0
	for w := range terms {
		if words[w] {
			n++
		}
	}
	return n
}
