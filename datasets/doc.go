// Package datasets holds the grounding corpus formats (docs/method.md step 1):
// the importer for JSONL (plain or gzip), Parquet shards and directories of
// text or markdown, with nested JSON field paths (Import, FieldPath), and
// the small corpus embedded in the binary (Embedded). docs/corpus.md
// describes formats, field paths, deduplication and skip reasons.
package datasets
