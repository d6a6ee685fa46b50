package datasets

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// SourceLabel returns the source label Import stores on the documents it
// reads from the input path p: source when it is not empty, else the base
// name of p made absolute and cleaned. So "docs", "docs/", "docs/.",
// "./docs" and "/abs/docs" all give "docs", and "." gives the name of the
// working directory (".." that of its parent). The name is taken from the
// spelling, not from the file system: a symbolic link is not resolved.
// When the working directory cannot be found, the base name of p cleaned.
func SourceLabel(source, p string) string {
	if source != "" {
		return source
	}
	if abs, err := filepath.Abs(p); err == nil {
		return filepath.Base(abs)
	}
	return filepath.Base(filepath.Clean(p))
}

// InputDigest returns the hex sha256 of what the documents Import makes
// from the input path p under opts take from p, whatever the working
// directory and however p is spelt ("x", "./x", "/abs/x", "dir/",
// "dir/."):
//
//   - for a file: its base name (the default source label, and the name
//     format auto goes by) and its content;
//   - for a directory: its source label (SourceLabel(opts.Source, p)) and,
//     in the order Import reads them, the slash-separated name relative
//     to p and the content of every .txt, .md and .markdown entry Import
//     reads (a regular file or a symbolic link to one, of at most
//     opts.MaxDocBytes bytes, DefaultMaxDocBytes when unset). Entries
//     Import skips without reading them add nothing, since they add no
//     document.
//
// The options themselves are not in the digest (a caller that
// fingerprints an import adds them, without Paths) and neither is the
// position of p among opts.Paths. Errors: the *fs.PathError of a path
// that cannot be stat'ed, walked or read.
func InputDigest(opts ImportOptions, p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if err := CheckRegular(p, fi); err != nil {
		return "", err
	}
	h := sha256.New()
	// Every string goes in with its length first, so no two sequences of
	// names and contents hash the same bytes.
	put := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) }
	if !fi.IsDir() {
		put("file")
		put(filepath.Base(filepath.Clean(p)))
		sum, err := fileSHA256(p)
		if err != nil {
			return "", err
		}
		put(sum)
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	maxBytes := opts.MaxDocBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxDocBytes
	}
	put("dir")
	put(SourceLabel(opts.Source, p))
	entries, err := listDir(p)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.skip != "" {
			continue
		}
		// As readDirDoc: the size is checked before the file is read.
		fi, err := os.Stat(e.path)
		if err != nil {
			return "", err
		}
		if fi.Size() > maxBytes {
			continue
		}
		rel, err := filepath.Rel(p, e.path)
		if err != nil {
			return "", err
		}
		put(filepath.ToSlash(rel))
		sum, err := fileSHA256(e.path)
		if err != nil {
			return "", err
		}
		put(sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileSHA256 returns the hex sha256 of the file at p.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CheckRegular refuses an input path that is neither a regular file nor a
// directory (a FIFO, a socket, a device): an import reads each input more
// than once (InputDigest, then the import itself), and a pipe gives its
// bytes only once, while opening one with no writer blocks until a writer
// comes. The error wraps ErrBadOptions and names the path and its type.
func CheckRegular(p string, fi os.FileInfo) error {
	if fi.IsDir() || fi.Mode().IsRegular() {
		return nil
	}
	kind := "special file"
	switch m := fi.Mode(); {
	case m&os.ModeNamedPipe != 0:
		kind = "named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		kind = "socket"
	case m&os.ModeCharDevice != 0:
		kind = "character device"
	case m&os.ModeDevice != 0:
		kind = "block device"
	}
	return fmt.Errorf("%w: %s is a %s, not a regular file or a directory: an import reads its inputs more than once (digest, then documents); write it to a file first", ErrBadOptions, p, kind)
}
