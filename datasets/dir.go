package datasets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/spade-pipeline/spade/schemas"
)

// dirExts are the file kinds a directory import reads.
var dirExts = map[string]bool{".txt": true, ".md": true, ".markdown": true}

// errOverCap marks a directory document skipped for size.
var errOverCap = errors.New("over the size cap")

// dirEntry is one .txt or .md entry found under an imported directory:
// a file to read, or why it is skipped without being read.
type dirEntry struct {
	path string
	skip string // "" for a file to read
}

// dirEntryOf classifies a .txt or .md directory entry. A symbolic link to
// a regular file is read like the file (datasets kept as links, as by
// git-annex); a dangling link, a link to anything else and a FIFO, socket
// or device are skipped with the reason, since reading a FIFO would block.
func dirEntryOf(p string, d fs.DirEntry) dirEntry {
	switch t := d.Type(); {
	case t.IsRegular():
		return dirEntry{path: p}
	case t&fs.ModeSymlink != 0:
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return dirEntry{path: p, skip: "a symbolic link that cannot be followed: " + err.Error()}
		case !fi.Mode().IsRegular():
			return dirEntry{path: p, skip: fmt.Sprintf("a symbolic link to a %s, not a regular file", FileKind(fi.Mode()))}
		}
		return dirEntry{path: p}
	default:
		return dirEntry{path: p, skip: fmt.Sprintf("a %s, not a regular file", FileKind(t))}
	}
}

// FileKind names a file type in words ("directory", "FIFO", "socket",
// "device", else "special file"), for errors about inputs that are not
// regular files (corpus and pool imports).
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// listDir returns the .txt, .md and .markdown entries under root in the
// order a directory import reads them. filepath.WalkDir visits entries in
// lexical order, which makes that order deterministic, and does not
// follow symbolic links to directories. InputDigest lists a directory
// with it too, so the fingerprint covers exactly the files read.
func listDir(root string) ([]dirEntry, error) {
	var entries []dirEntry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && !d.IsDir() && dirExts[strings.ToLower(filepath.Ext(p))] {
			entries = append(entries, dirEntryOf(p, d))
		}
		return nil
	})
	return entries, err
}

func (im *importer) importDir(ctx context.Context, root string) error {
	entries, err := listDir(root)
	if err != nil {
		return fmt.Errorf("import %s: %w", root, err)
	}
	if len(entries) == 0 {
		return fmt.Errorf("import %s: %w: no .txt or .md files", root, ErrEmptyInput)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := e.path
		im.rep.Read++
		if e.skip != "" {
			im.skip(p, 0, "", e.skip)
			continue
		}
		im.rep.Files++
		doc, err := readDirDoc(p, im.opts.MaxDocBytes)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return fmt.Errorf("import %s: %w", p, err)
			}
			im.skip(p, 0, "text", err.Error())
			continue
		}
		doc.Source = im.curSource
		if err := im.accept(p, 0, doc); err != nil {
			return err
		}
	}
	return nil
}

// readDirDoc reads one .txt or .md document; the size cap is checked
// before the file is read. Errors other than *fs.PathError describe why
// the document is skipped.
func readDirDoc(p string, maxBytes int64) (schemas.CorpusDoc, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return schemas.CorpusDoc{}, err
	}
	if fi.Size() > maxBytes {
		return schemas.CorpusDoc{}, fmt.Errorf("%w: file is %d bytes, over the cap of %d bytes (MaxDocBytes)", errOverCap, fi.Size(), maxBytes)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return schemas.CorpusDoc{}, err
	}
	name := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
	if strings.ToLower(filepath.Ext(p)) == ".txt" {
		if !utf8.Valid(data) {
			return schemas.CorpusDoc{}, errors.New("text is not valid UTF-8")
		}
		text := strings.TrimSpace(string(data))
		if text == "" {
			return schemas.CorpusDoc{}, errors.New("text is empty")
		}
		return schemas.CorpusDoc{Title: name, Text: text}, nil
	}
	doc, err := ParseMarkdownDoc(data)
	if err != nil {
		return schemas.CorpusDoc{}, err
	}
	if doc.Title == "" {
		doc.Title = name
	}
	return doc, nil
}

// ParseMarkdownDoc parses one markdown document into a CorpusDoc with
// Source and SHA256 left for the caller. It takes optional YAML front
// matter between "---" lines at the very start. Front-matter keys id,
// title, domain and license fill the matching fields (values must be
// scalars); other keys are ignored. Without a title key the title is the
// first markdown heading (ATX "# Title" or setext "Title\n====") outside
// fenced code. Text is the body after the front matter, trimmed of
// surrounding white space. Errors: invalid UTF-8, unterminated or invalid
// front matter, empty body.
func ParseMarkdownDoc(data []byte) (schemas.CorpusDoc, error) {
	if !utf8.Valid(data) {
		return schemas.CorpusDoc{}, errors.New("text is not valid UTF-8")
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var doc schemas.CorpusDoc
	body := string(data)
	if fm, rest, ok, err := splitFrontMatter(body); err != nil {
		return schemas.CorpusDoc{}, err
	} else if ok {
		var meta map[string]any
		if err := yaml.Unmarshal([]byte(fm), &meta); err != nil {
			return schemas.CorpusDoc{}, fmt.Errorf("front matter: %w", err)
		}
		for _, kv := range []struct {
			key string
			dst *string
		}{{"id", &doc.DocID}, {"title", &doc.Title}, {"domain", &doc.Domain}, {"license", &doc.License}} {
			key, dst := kv.key, kv.dst
			v, ok := meta[key]
			if !ok || v == nil {
				continue
			}
			switch v.(type) {
			case map[string]any, []any:
				return schemas.CorpusDoc{}, fmt.Errorf("front matter: %s is not a scalar", key)
			}
			*dst = strings.TrimSpace(fmt.Sprint(v))
		}
		body = rest
	}
	doc.Text = strings.TrimSpace(body)
	if doc.Text == "" {
		return schemas.CorpusDoc{}, errors.New("text is empty")
	}
	if doc.Title == "" {
		doc.Title = firstHeading(doc.Text)
	}
	return doc, nil
}

// splitFrontMatter separates a leading "---" ... "---" block.
func splitFrontMatter(s string) (fm, rest string, ok bool, err error) {
	first, after, found := strings.Cut(s, "\n")
	if strings.TrimRight(first, " \t\r") != "---" || !found {
		return "", s, false, nil
	}
	var b strings.Builder
	for after != "" {
		var line string
		line, after, _ = strings.Cut(after, "\n")
		if t := strings.TrimRight(line, " \t\r"); t == "---" || t == "..." {
			return b.String(), after, true, nil
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return "", "", false, errors.New("front matter is not closed by a --- line")
}

// firstHeading finds the first ATX or setext heading outside fenced code.
func firstHeading(text string) string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, raw := range lines {
		line := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence || len(line)-len(trimmed) > 3 {
			continue
		}
		if h := strings.TrimLeft(trimmed, "#"); len(trimmed)-len(h) >= 1 && len(trimmed)-len(h) <= 6 && (h == "" || h[0] == ' ' || h[0] == '\t') {
			title := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(h), "#"))
			if title != "" {
				return title
			}
			continue
		}
		if i+1 < len(lines) && strings.TrimSpace(line) != "" {
			next := strings.TrimSpace(lines[i+1])
			if len(next) >= 2 && (strings.Trim(next, "=") == "" || strings.Trim(next, "-") == "") {
				return strings.TrimSpace(line)
			}
		}
	}
	return ""
}
