package datasets

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/spade-pipeline/spade/schemas"
)

// Sentinel errors for failures of a whole input; callers branch on them
// with errors.Is. Per-row problems never surface as errors: they are
// counted in ImportReport and listed as RowIssue values.
var (
	// ErrBadOptions: ImportOptions are unusable (no paths, unknown format,
	// a malformed field path, a format that does not fit the path).
	ErrBadOptions = errors.New("bad import options")
	// ErrEmptyInput: a file (or directory) holds no rows at all.
	ErrEmptyInput = errors.New("empty input")
	// ErrCorruptInput: a file cannot be decoded as its format (bad or
	// truncated gzip stream, Parquet footer or pages).
	ErrCorruptInput = errors.New("corrupt input")
	// ErrNoParsableRows: a JSONL file in which no line could be decoded
	// as a JSON object (each is malformed, not an object, or over the line
	// cap); almost always the wrong file, the wrong format or a cap set
	// too low.
	ErrNoParsableRows = errors.New("no parsable rows")
	// ErrFieldPathUnmatched: a configured field path resolved on none of
	// the parsed rows of a file; almost always a misspelt path.
	ErrFieldPathUnmatched = errors.New("field path matches no row")
	// ErrNoDocuments: rows were read but every one was skipped, so the
	// import produced no document. Import returns it as a
	// *NoDocumentsError, whose message lists the first reasons.
	ErrNoDocuments = errors.New("import produced no documents")
)

// Defaults for ImportOptions fields left zero.
const (
	// DefaultMaxDocBytes caps one document's text: 4 MiB, well above the
	// longest unarXive paper (~1 MB) and far below what a model prompt
	// can use.
	DefaultMaxDocBytes int64 = 4 << 20
	// MaxReportedIssues caps ImportReport.Issues and ImportReport.Repairs;
	// the counters keep counting past it.
	MaxReportedIssues = 1000
	// NoDocumentsListed is how many skipped rows a NoDocumentsError's
	// message lists.
	NoDocumentsListed = 10
)

// Format names accepted in ImportOptions.Format.
const (
	FormatAuto    = "auto"
	FormatJSONL   = "jsonl"
	FormatParquet = "parquet"
	FormatDir     = "dir"
)

// ImportOptions configures Import. Field paths use the FieldPath grammar
// and apply to JSONL and Parquet rows; directory documents take id, title,
// domain and license from their front matter instead (see docs/corpus.md).
type ImportOptions struct {
	// Paths lists input files or directories, imported in this order.
	Paths []string
	// Format is FormatAuto (or ""), FormatJSONL, FormatParquet or
	// FormatDir. Auto picks dir for directories, parquet for *.parquet
	// or a PAR1 header, jsonl for *.jsonl[.gz], *.ndjson[.gz], *.json[.gz]
	// or a gzip/JSON-looking start.
	Format string
	// IDPath is the document id; empty means the first 16 hex digits of
	// the text's sha256. When set it is required on every row.
	IDPath string
	// TitlePath, LicensePath and DomainPath are optional: a row without
	// them gets an empty value.
	TitlePath, LicensePath, DomainPath string
	// TextPaths are concatenated in order, non-blank pieces joined by a
	// blank line ("\n\n"); "a[].b" contributes one piece per element.
	// At least one must be present on a row. Default: ["text"].
	TextPaths []string
	// Source is stored in CorpusDoc.Source; default: each input path's
	// base name, however the path is spelt (see SourceLabel).
	Source string
	// MaxDocBytes caps a document's text in bytes; longer documents are
	// skipped. Default DefaultMaxDocBytes.
	MaxDocBytes int64
	// MaxLineBytes caps one JSONL line in bytes; a longer line is skipped
	// while it is read, never held in memory whole. Default 4*MaxDocBytes,
	// since a line also carries fields other than the text.
	MaxLineBytes int64
	// StrictJSON turns off the repair of JSON lines with invalid string
	// escapes or raw control characters (see ImportReport.Repairs); such
	// lines are then skipped.
	StrictJSON bool
}

// RowIssue locates one skipped or repaired row.
type RowIssue struct {
	// File is the input file path as given (or found under a directory).
	File string `json:"file"`
	// Line is the 1-based JSONL line or Parquet row number; 0 for a
	// directory document (the file is the row).
	Line int64 `json:"line"`
	// Field is the field path concerned, or "" for the whole row.
	Field string `json:"field"`
	// Reason says what was wrong, in words.
	Reason string `json:"reason"`
}

// String renders the issue as "file:line field path: reason", or
// "file:line: reason" when it concerns the whole row (Field is empty).
// ":line" is left out when Line is 0 (a directory document).
func (r RowIssue) String() string {
	var b strings.Builder
	b.WriteString(r.File)
	if r.Line > 0 {
		fmt.Fprintf(&b, ":%d", r.Line)
	}
	if r.Field != "" {
		fmt.Fprintf(&b, " field %s", r.Field)
	}
	b.WriteString(": ")
	b.WriteString(r.Reason)
	return b.String()
}

// NoDocumentsError is the error Import returns when it read rows but
// skipped every one of them. It wraps ErrNoDocuments; Report is the
// import's report, with the reasons in Report.Issues.
type NoDocumentsError struct {
	// Report is the report of the failed import.
	Report ImportReport
}

// Error says how many rows were read and skipped and lists the first
// NoDocumentsListed of them, one "skipped <RowIssue>" line each.
func (e *NoDocumentsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v (%d rows read, %d skipped)", ErrNoDocuments, e.Report.Read, e.Report.Skipped)
	issues := e.Report.Issues
	if len(issues) > NoDocumentsListed {
		issues = issues[:NoDocumentsListed]
	}
	if len(issues) > 0 {
		b.WriteString(":")
	}
	for _, is := range issues {
		b.WriteString("\n  skipped ")
		b.WriteString(is.String())
	}
	if more := e.Report.Skipped - int64(len(issues)); more > 0 && len(issues) > 0 {
		fmt.Fprintf(&b, "\n  ... and %d more skipped rows", more)
	}
	return b.String()
}

// Unwrap returns ErrNoDocuments.
func (e *NoDocumentsError) Unwrap() error { return ErrNoDocuments }

// ImportReport summarises an Import. Every row read ends in exactly one of
// Imported, Duplicates or Skipped: Read == Imported + Duplicates + Skipped.
type ImportReport struct {
	// Files counts input files opened (directory entries included).
	Files int `json:"files"`
	// Read counts rows seen: non-blank JSONL lines, Parquet rows,
	// directory documents.
	Read int64 `json:"read"`
	// Imported counts documents passed to emit.
	Imported int64 `json:"imported"`
	// Duplicates counts rows whose text hash was already imported.
	Duplicates int64 `json:"duplicates"`
	// Skipped counts rows dropped for a reason listed in Issues.
	Skipped int64 `json:"skipped"`
	// Repaired counts JSONL lines imported after repair of invalid escapes
	// or raw control characters (they are also counted in Imported).
	Repaired int64 `json:"repaired"`
	// Issues lists skipped rows in input order, at most MaxReportedIssues.
	Issues []RowIssue `json:"issues"`
	// Repairs lists repaired lines, at most MaxReportedIssues.
	Repairs []RowIssue `json:"repairs"`
}

// Import reads every input in opts.Paths, in order, and calls emit once
// per imported document, in input order. Documents are deduplicated by
// the sha256 of their text, keeping the first occurrence. Rows that cannot
// become a document (missing required field, invalid UTF-8, empty or
// oversized text, unparsable JSON, a doc id reused for a different text)
// are skipped and listed in the report. Whole-input failures return an
// error naming the file (and line or row where there is one) that wraps
// one of the sentinels above or the os error; emit's error is returned
// wrapped. An import that reads rows but skips all of them fails with a
// *NoDocumentsError (ErrNoDocuments) listing the first reasons. After an
// error some documents may already have been emitted: treat the import as
// failed. Deterministic: same inputs, same options, same calls to emit.
func Import(ctx context.Context, opts ImportOptions, emit func(schemas.CorpusDoc) error) (ImportReport, error) {
	im, err := newImporter(opts, emit)
	if err != nil {
		return ImportReport{}, err
	}
	for _, p := range im.opts.Paths {
		if err := ctx.Err(); err != nil {
			return im.rep, err
		}
		if err := im.importPath(ctx, p); err != nil {
			return im.rep, err
		}
	}
	if im.rep.Imported == 0 {
		return im.rep, &NoDocumentsError{Report: im.rep}
	}
	return im.rep, nil
}

// fieldSpec is one configured field path and how many rows it matched in
// the current file.
type fieldSpec struct {
	flag    string // option name, for messages
	path    FieldPath
	matched int64
}

type importer struct {
	opts ImportOptions
	// lineCapName says where opts.MaxLineBytes came from, for the
	// over-the-line-cap reason.
	lineCapName string
	id          *fieldSpec
	title       *fieldSpec
	license     *fieldSpec
	domain      *fieldSpec
	text        []*fieldSpec
	emit        func(schemas.CorpusDoc) error
	rep         ImportReport
	seenHash    map[[32]byte]struct{}
	seenID      map[string]string // doc id -> "file:line" of its first import
	curSource   string
}

func newImporter(opts ImportOptions, emit func(schemas.CorpusDoc) error) (*importer, error) {
	if len(opts.Paths) == 0 {
		return nil, fmt.Errorf("%w: no input paths", ErrBadOptions)
	}
	if emit == nil {
		return nil, fmt.Errorf("%w: nil emit function", ErrBadOptions)
	}
	if err := opts.checkFormat(); err != nil {
		return nil, err
	}
	if opts.Format == "" {
		opts.Format = FormatAuto
	}
	if opts.MaxDocBytes <= 0 {
		opts.MaxDocBytes = DefaultMaxDocBytes
	}
	lineCapName := "MaxLineBytes"
	if opts.MaxLineBytes <= 0 {
		// 4 x MaxDocBytes, saturating: past math.MaxInt64/4 the product
		// wrapped to a negative or zero cap, and every line was "over the
		// line cap of -4 bytes".
		opts.MaxLineBytes = math.MaxInt64
		if opts.MaxDocBytes <= math.MaxInt64/4 {
			opts.MaxLineBytes = 4 * opts.MaxDocBytes
		}
		lineCapName = "4 x MaxDocBytes, set with --max-doc-bytes; raise that to read longer lines"
	}
	if len(opts.TextPaths) == 0 {
		opts.TextPaths = []string{"text"}
	}
	im := &importer{
		rep:         ImportReport{Issues: []RowIssue{}, Repairs: []RowIssue{}}, // [] not null in JSON
		opts:        opts,
		lineCapName: lineCapName,
		emit:        emit,
		seenHash:    make(map[[32]byte]struct{}),
		seenID:      make(map[string]string),
	}
	if err := im.parseFieldPaths(); err != nil {
		return nil, err
	}
	return im, nil
}

// OptionError is an import option that cannot be used whatever the
// inputs: an unknown format or a malformed field path. Check returns it,
// and Import for the same options before it reads anything.
type OptionError struct {
	// Option names the option as spade corpus import's flag does, without
	// the dashes: format, id, title, license, domain or text.
	Option string
	// Err says what is wrong, quoting the value.
	Err error
}

// Error reads "bad import options: OPTION: what is wrong".
func (e *OptionError) Error() string {
	return fmt.Sprintf("%v: %s: %v", ErrBadOptions, e.Option, e.Err)
}

// Unwrap returns ErrBadOptions and Err, so that errors.Is matches both
// (ErrBadFieldPath for a malformed field path).
func (e *OptionError) Unwrap() []error { return []error{ErrBadOptions, e.Err} }

// Check validates what the options say by themselves, without reading any
// input: Format is a known format, and every field path (IDPath,
// TitlePath, LicensePath, DomainPath, TextPaths) parses. It returns the
// *OptionError Import would return, so that a caller can refuse bad
// options before anything else (spade corpus import does, before it
// looks at the run). Paths is not looked at.
func (o ImportOptions) Check() error {
	if err := o.checkFormat(); err != nil {
		return err
	}
	if len(o.TextPaths) == 0 {
		o.TextPaths = []string{"text"}
	}
	return (&importer{opts: o}).parseFieldPaths()
}

// checkFormat returns an *OptionError for an unknown Format.
func (o ImportOptions) checkFormat() error {
	switch o.Format {
	case "", FormatAuto, FormatJSONL, FormatParquet, FormatDir:
		return nil
	}
	return &OptionError{Option: "format", Err: fmt.Errorf("unknown format %q (want auto, jsonl, parquet or dir)", o.Format)}
}

// parseFieldPaths parses im.opts's field paths into im's specs (TextPaths
// already defaulted), or returns an *OptionError naming the first that
// does not parse.
func (im *importer) parseFieldPaths() error {
	parse := func(flag, s string) (*fieldSpec, error) {
		if s == "" {
			return nil, nil
		}
		p, err := ParseFieldPath(s)
		if err != nil {
			return nil, &OptionError{Option: flag, Err: err}
		}
		return &fieldSpec{flag: flag, path: p}, nil
	}
	var err error
	if im.id, err = parse("id", im.opts.IDPath); err != nil {
		return err
	}
	if im.title, err = parse("title", im.opts.TitlePath); err != nil {
		return err
	}
	if im.license, err = parse("license", im.opts.LicensePath); err != nil {
		return err
	}
	if im.domain, err = parse("domain", im.opts.DomainPath); err != nil {
		return err
	}
	for _, s := range im.opts.TextPaths {
		f, err := parse("text", s)
		if err != nil {
			return err
		}
		if f == nil {
			return &OptionError{Option: "text", Err: errors.New("empty field path")}
		}
		im.text = append(im.text, f)
	}
	return nil
}

// specs lists the configured field paths in a fixed order.
func (im *importer) specs() []*fieldSpec {
	var out []*fieldSpec
	for _, f := range []*fieldSpec{im.id, im.title, im.license, im.domain} {
		if f != nil {
			out = append(out, f)
		}
	}
	return append(out, im.text...)
}

func (im *importer) importPath(ctx context.Context, p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("import %s: %w", p, err)
	}
	format, err := resolveFormat(im.opts.Format, p, fi)
	if err != nil {
		return err
	}
	im.curSource = SourceLabel(im.opts.Source, p)
	for _, f := range im.specs() {
		f.matched = 0
	}
	switch format {
	case FormatJSONL:
		return im.importJSONLFile(ctx, p)
	case FormatParquet:
		return im.importParquetFile(ctx, p)
	default:
		return im.importDir(ctx, p)
	}
}

// CheckPath checks that input p can be read with the options' Format:
// p exists, a directory has format dir (or auto), a file another format,
// and with auto the format can be told from p's name or first bytes. Its
// errors are those Import returns for p before reading any row: the
// *fs.PathError of a path that cannot be stat'ed (wrapped, naming p), or
// one wrapping ErrBadOptions (ErrEmptyInput for an empty file whose
// format auto cannot tell).
func (o ImportOptions) CheckPath(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("import %s: %w", p, err)
	}
	format := o.Format
	if format == "" {
		format = FormatAuto
	}
	_, err = resolveFormat(format, p, fi)
	return err
}

// resolveFormat returns the format input p (fi) is read with: format, or
// for auto the detected one; an error when the format does not fit p.
func resolveFormat(format, p string, fi os.FileInfo) (string, error) {
	if err := CheckRegular(p, fi); err != nil {
		return "", err
	}
	if format == FormatAuto {
		var err error
		if format, err = detectFormat(p, fi); err != nil {
			return "", err
		}
	}
	if fi.IsDir() != (format == FormatDir) {
		if fi.IsDir() {
			return "", fmt.Errorf("%w: %s is a directory, but format is %s", ErrBadOptions, p, format)
		}
		return "", fmt.Errorf("%w: %s is a file, but format is dir", ErrBadOptions, p)
	}
	return format, nil
}

// detectFormat picks a format from the name, then from the first bytes.
func detectFormat(p string, fi os.FileInfo) (string, error) {
	if fi.IsDir() {
		return FormatDir, nil
	}
	name := strings.ToLower(filepath.Base(p))
	name = strings.TrimSuffix(name, ".gz")
	switch filepath.Ext(name) {
	case ".parquet", ".pq":
		return FormatParquet, nil
	case ".jsonl", ".ndjson", ".json":
		return FormatJSONL, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("import %s: %w", p, err)
	}
	defer f.Close()
	head, err := bufio.NewReader(f).Peek(4)
	if len(head) == 0 {
		return "", fmt.Errorf("import %s: %w: file is empty", p, ErrEmptyInput)
	}
	_ = err // a short file just has a short head
	switch {
	case bytes.HasPrefix(head, []byte("PAR1")):
		return FormatParquet, nil
	case bytes.HasPrefix(head, gzipMagic):
		return FormatJSONL, nil
	case bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n\ufeff"), []byte("{")):
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("%w: cannot tell the format of %s from its name or first bytes; set the format", ErrBadOptions, p)
}

// skip records a skipped row.
func (im *importer) skip(file string, line int64, field, reason string) {
	im.rep.Skipped++
	if len(im.rep.Issues) < MaxReportedIssues {
		im.rep.Issues = append(im.rep.Issues, RowIssue{File: file, Line: line, Field: field, Reason: reason})
	}
}

// repaired records a repaired JSONL line.
func (im *importer) repaired(file string, line int64, reason string) {
	im.rep.Repaired++
	if len(im.rep.Repairs) < MaxReportedIssues {
		im.rep.Repairs = append(im.rep.Repairs, RowIssue{File: file, Line: line, Reason: reason})
	}
}

// extracted is one field's values on one row.
type extracted struct {
	vals  []string
	found bool
	err   error
}

// invalidText says why s is not valid Unicode text, or "" if it is; marks
// as for row. Split out of row to keep it short.
func invalidText(s string, marks Marks) string {
	switch {
	case !utf8.ValidString(s) || (marks.Bytes != "" && strings.Contains(s, marks.Bytes)):
		return "is not valid UTF-8"
	case marks.Surrogate != "" && strings.Contains(s, marks.Surrogate):
		return `holds a \u escape of a lone UTF-16 surrogate (D800-DFFF outside a pair), which is no character`
	}
	return ""
}

// single returns the one trimmed value e of the single-valued field f
// (none when f is nil or, unless required, missing), or false after
// recording why the row is skipped; split out of row to keep it short.
func (im *importer) single(file string, line int64, f *fieldSpec, e extracted, required bool, marks Marks) (string, bool) {
	if f == nil {
		return "", true
	}
	switch {
	case e.err != nil:
		im.skip(file, line, f.path.String(), fmt.Sprintf("%s field: %v", f.flag, e.err))
		return "", false
	case len(e.vals) == 0:
		if required {
			im.skip(file, line, f.path.String(), fmt.Sprintf("required %s field is missing", f.flag))
			return "", false
		}
		return "", true
	case len(e.vals) > 1:
		im.skip(file, line, f.path.String(), fmt.Sprintf("%s field matched %d values, want one", f.flag, len(e.vals)))
		return "", false
	case invalidText(e.vals[0], marks) != "":
		im.skip(file, line, f.path.String(), fmt.Sprintf("%s field %s", f.flag, invalidText(e.vals[0], marks)))
		return "", false
	}
	return strings.TrimSpace(e.vals[0]), true
}

// row turns one decoded row into a document, or records why not. marks
// names the stand-ins the JSONL decoder put in place of text that is not
// valid Unicode (zero for other formats); a value holding one came from
// such text. The returned error is fatal (emit failed).
func (im *importer) row(file string, line int64, v any, marks Marks) error {
	// Extract every field first so match counts do not depend on which
	// check fails first.
	get := func(f *fieldSpec) extracted {
		if f == nil {
			return extracted{}
		}
		vals, found, err := f.path.Extract(v)
		if found {
			f.matched++
		}
		return extracted{vals, found, err}
	}
	id, title, license, domain := get(im.id), get(im.title), get(im.license), get(im.domain)
	texts := make([]extracted, len(im.text))
	for i, f := range im.text {
		texts[i] = get(f)
	}
	invalid := func(s string) string { return invalidText(s, marks) }
	single := func(f *fieldSpec, e extracted, required bool) (string, bool) {
		return im.single(file, line, f, e, required, marks)
	}
	docID, ok := single(im.id, id, true)
	if !ok {
		return nil
	}
	if im.id != nil && docID == "" {
		im.skip(file, line, im.id.path.String(), "id field is empty")
		return nil
	}
	if im.id != nil && strings.ContainsAny(docID, "\n\r\x00") {
		im.skip(file, line, im.id.path.String(), "id field holds a line break or NUL")
		return nil
	}
	docTitle, ok := single(im.title, title, false)
	if !ok {
		return nil
	}
	docLicense, ok := single(im.license, license, false)
	if !ok {
		return nil
	}
	docDomain, ok := single(im.domain, domain, false)
	if !ok {
		return nil
	}

	anyFound := false
	var size int64
	var pieces []string
	for i, e := range texts {
		f := im.text[i]
		if e.err != nil {
			im.skip(file, line, f.path.String(), fmt.Sprintf("text field: %v", e.err))
			return nil
		}
		anyFound = anyFound || e.found
		for _, s := range e.vals {
			if strings.TrimSpace(s) == "" {
				continue
			}
			if why := invalid(s); why != "" {
				im.skip(file, line, f.path.String(), "text field "+why)
				return nil
			}
			if len(pieces) > 0 {
				size += 2
			}
			size += int64(len(s))
			pieces = append(pieces, s)
		}
	}
	textFields := make([]string, len(im.text))
	for i, f := range im.text {
		textFields[i] = f.path.String()
	}
	textField := strings.Join(textFields, ", ")
	switch {
	case !anyFound:
		im.skip(file, line, textField, "required text field is missing")
		return nil
	case len(pieces) == 0:
		im.skip(file, line, textField, "text is empty")
		return nil
	case size > im.opts.MaxDocBytes:
		im.skip(file, line, textField, fmt.Sprintf("text is %d bytes, over the cap of %d bytes (MaxDocBytes)", size, im.opts.MaxDocBytes))
		return nil
	}
	text := strings.Join(pieces, "\n\n")
	return im.accept(file, line, schemas.CorpusDoc{
		DocID:   docID,
		Source:  im.curSource,
		Title:   docTitle,
		Domain:  docDomain,
		Text:    text,
		License: docLicense,
	})
}

// accept fills the hash and id, deduplicates and emits.
func (im *importer) accept(file string, line int64, doc schemas.CorpusDoc) error {
	sum := sha256.Sum256([]byte(doc.Text))
	if _, dup := im.seenHash[sum]; dup {
		im.rep.Duplicates++
		return nil
	}
	doc.SHA256 = hex.EncodeToString(sum[:])
	if doc.DocID == "" {
		doc.DocID = doc.SHA256[:16]
	}
	where := file
	if line > 0 {
		where = fmt.Sprintf("%s:%d", file, line)
	}
	if first, ok := im.seenID[doc.DocID]; ok {
		field := ""
		if im.id != nil {
			field = im.id.path.String()
		}
		im.skip(file, line, field, fmt.Sprintf("doc id %q was already imported from %s with a different text", doc.DocID, first))
		return nil
	}
	im.seenHash[sum] = struct{}{}
	im.seenID[doc.DocID] = where
	if err := im.emit(doc); err != nil {
		return fmt.Errorf("import %s: emit doc %s: %w", where, doc.DocID, err)
	}
	im.rep.Imported++
	return nil
}

// checkMatched fails a file on which some configured path matched no row.
func (im *importer) checkMatched(file string, parsed int64) error {
	if parsed == 0 {
		return nil
	}
	for _, f := range im.specs() {
		if f.matched == 0 {
			return fmt.Errorf("import %s: %w: %s path %q matched none of %d rows; check the field path against the data",
				file, ErrFieldPathUnmatched, f.flag, f.path.String(), parsed)
		}
	}
	return nil
}
