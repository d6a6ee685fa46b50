package schemas

// CorpusDoc is one row of the corpus table: a grounding document
// (docs/method.md step 1). Key: DocID.
type CorpusDoc struct {
	// DocID is the stable document id: the source's own id where it has one
	// (e.g. an arXiv id), else a prefix of the text's sha256.
	DocID string `parquet:"doc_id" json:"doc_id"`
	// Source names where the document came from: "embedded", or the
	// imported file's base name.
	Source string `parquet:"source" json:"source"`
	// Title is the document's title ("" when an import has none). Designer
	// prompts show it as the document's heading; the procedural backend
	// keeps it out of the sources it writes (docs/procedural.md).
	Title string `parquet:"title" json:"title"`
	// Domain is a coarse field label (e.g. "Mathematics", "physics").
	Domain string `parquet:"domain" json:"domain"`
	// Text is the full UTF-8 text, in bytes as imported.
	Text string `parquet:"text,zstd" json:"text"`
	// License is the document's licence as the source states it ("" when
	// an import has none; required for the embedded corpus).
	License string `parquet:"license" json:"license"`
	// SHA256 is the hex sha256 of Text; documents are deduplicated by it.
	SHA256 string `parquet:"sha256" json:"sha256"`
}
