package datasets

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/spade-pipeline/spade/schemas"
)

// CheckDoc verifies the invariants every imported or embedded document
// holds: non-empty DocID, valid UTF-8 in every string field, non-blank
// Text, and SHA256 equal to the hex sha256 of Text. The error names the
// first failing field.
func CheckDoc(d schemas.CorpusDoc) error { return checkDoc(d) }

func checkDoc(d schemas.CorpusDoc) error {
	if d.DocID == "" {
		return errors.New("doc_id is empty")
	}
	for _, f := range []struct{ name, val string }{
		{"doc_id", d.DocID}, {"source", d.Source}, {"title", d.Title}, {"domain", d.Domain},
		{"text", d.Text}, {"license", d.License},
	} {
		if !utf8.ValidString(f.val) {
			return fmt.Errorf("%s is not valid UTF-8", f.name)
		}
	}
	if strings.TrimSpace(d.Text) == "" {
		return errors.New("text is empty")
	}
	sum := sha256.Sum256([]byte(d.Text))
	if d.SHA256 != hex.EncodeToString(sum[:]) {
		return fmt.Errorf("sha256 %q does not match text", d.SHA256)
	}
	return nil
}
