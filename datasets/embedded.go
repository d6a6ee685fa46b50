package datasets

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/spade-pipeline/spade/schemas"
)

//go:embed embedded/docs/*.md
var embeddedFS embed.FS

// EmbeddedSource is CorpusDoc.Source for the shipped default corpus.
const EmbeddedSource = "embedded"

// EmbeddedDomains are the CorpusDoc.Domain values of the embedded corpus,
// in a fixed order; every embedded document carries one of them.
var EmbeddedDomains = []string{"mathematics", "physics", "chemistry", "biology-medicine", "computer-science", "engineering"}

// Embedded returns the default corpus shipped inside the binary: short
// original documents (CC0-1.0, ~250-450 words each) across the six
// EmbeddedDomains, written for environment designers to mine for named
// entities, quantities and processes (docs/method.md step 1). Each file under
// embedded/docs is markdown with front matter id, title, domain, license.
// The result is sorted by DocID, with Source "embedded" and SHA256 set; a
// fresh slice on every call. Errors (a malformed embedded file, a missing
// front-matter key, an unknown domain, a duplicate id or text) mean the
// build is broken, and name the file.
func Embedded() ([]schemas.CorpusDoc, error) {
	names, err := fs.Glob(embeddedFS, "embedded/docs/*.md")
	if err != nil {
		return nil, fmt.Errorf("embedded corpus: %w", err)
	}
	slices.Sort(names)
	docs := make([]schemas.CorpusDoc, 0, len(names))
	ids := make(map[string]string, len(names))
	hashes := make(map[string]string, len(names))
	for _, name := range names {
		data, err := embeddedFS.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("embedded corpus: %w", err)
		}
		doc, err := ParseMarkdownDoc(data)
		if err != nil {
			return nil, fmt.Errorf("embedded corpus %s: %w", path.Base(name), err)
		}
		for _, f := range []struct{ key, val string }{{"id", doc.DocID}, {"title", doc.Title}, {"domain", doc.Domain}, {"license", doc.License}} {
			if f.val == "" {
				return nil, fmt.Errorf("embedded corpus %s: front matter lacks %s", path.Base(name), f.key)
			}
		}
		if !slices.Contains(EmbeddedDomains, doc.Domain) {
			return nil, fmt.Errorf("embedded corpus %s: unknown domain %q (want one of %s)", path.Base(name), doc.Domain, strings.Join(EmbeddedDomains, ", "))
		}
		sum := sha256.Sum256([]byte(doc.Text))
		doc.SHA256 = hex.EncodeToString(sum[:])
		doc.Source = EmbeddedSource
		if prev, ok := ids[doc.DocID]; ok {
			return nil, fmt.Errorf("embedded corpus %s: id %q already used by %s", path.Base(name), doc.DocID, prev)
		}
		if prev, ok := hashes[doc.SHA256]; ok {
			return nil, fmt.Errorf("embedded corpus %s: same text as %s", path.Base(name), prev)
		}
		ids[doc.DocID] = path.Base(name)
		hashes[doc.SHA256] = path.Base(name)
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("embedded corpus: %w: no documents", ErrEmptyInput)
	}
	slices.SortFunc(docs, func(a, b schemas.CorpusDoc) int { return strings.Compare(a.DocID, b.DocID) })
	return docs, nil
}
