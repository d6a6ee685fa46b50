package datasets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spade-pipeline/spade/schemas"
)

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 300<<10) // beyond bufio's 64 KiB buffer
	input := "a\r\n\n" + long + "\n" + strings.Repeat("y", 2000) + "\nlast"
	br := bufio.NewReaderSize(strings.NewReader(input), 64<<10)
	type got struct {
		line  string
		total int64
		over  bool
	}
	var lines []got
	for {
		line, total, over, err := readLine(br, 1<<20, nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, got{string(line), total, over})
	}
	want := []got{{"a", 3, false}, {"", 1, false}, {long, int64(len(long)) + 1, false}, {strings.Repeat("y", 2000), 2001, false}, {"last", 4, false}}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: got (%d bytes, total %d, over %v), want (%d bytes, total %d, over %v)",
				i, len(lines[i].line), lines[i].total, lines[i].over, len(want[i].line), want[i].total, want[i].over)
		}
	}

	t.Run("over cap is consumed, not kept", func(t *testing.T) {
		br := bufio.NewReaderSize(strings.NewReader(long+"\nnext\n"), 64<<10)
		line, total, over, err := readLine(br, 1000, nil)
		if err != nil || !over || len(line) != 0 || total != int64(len(long))+1 {
			t.Fatalf("got len %d total %d over %v err %v", len(line), total, over, err)
		}
		line, _, over, err = readLine(br, 1000, nil)
		if err != nil || over || string(line) != "next" {
			t.Fatalf("line after the long one: %q over %v err %v", line, over, err)
		}
	})
}

func TestDecodeJSONLine(t *testing.T) {
	tests := []struct {
		name       string
		line       string
		repair     bool
		wantErr    string
		wantRepair bool
		field      string // a top-level key whose value is checked
		want       string
		wantMarker bool // invalid UTF-8 in t, marked by Marks.Bytes
		wantLone   bool // a lone surrogate escape in t, marked by Marks.Surrogate
	}{
		{name: "plain", line: `{"t":"hi"}`, field: "t", want: "hi"},
		{name: "number kept exact", line: `{"t":12345678901234567890}`, field: "t", want: "12345678901234567890"},
		{name: "array", line: `[1,2]`, wantErr: "JSON array, not an object"},
		{name: "string", line: `"x"`, wantErr: "JSON string, not an object"},
		{name: "trailing", line: `{"a":1} {"b":2}`, wantErr: "trailing data"},
		{name: "truncated", line: `{"a":`, wantErr: "unexpected EOF"},
		{name: "bad escape strict", line: `{"t":"a\user@example.org"}`, wantErr: "invalid character"},
		{name: "bad escape repaired", line: `{"t":"a\user@example.org\nb"}`, repair: true, wantRepair: true, field: "t", want: "a\\user@example.org\nb"},
		{name: "short unicode escape repaired", line: `{"t":"x\u12"}`, repair: true, wantRepair: true, field: "t", want: `x\u12`},
		{name: "raw tab repaired", line: "{\"t\":\"a\tb\"}", repair: true, wantRepair: true, field: "t", want: "a\tb"},
		{name: "valid escapes untouched", line: `{"t":"\"\\\/\b\f\n\r\t\u00e9"}`, repair: true, field: "t", want: "\"\\/\b\f\n\r\té"},
		{name: "repair cannot fix structure; original error kept", line: `{"t":"a\q"`, repair: true, wantErr: "invalid character 'q'"},
		{name: "invalid utf8 marked", line: "{\"t\":\"a\xffb\",\"u\":\"ok\"}", field: "t", wantMarker: true},
		{name: "lone high surrogate marked", line: `{"t":"t4\ud800x","u":"ok"}`, field: "t", wantLone: true},
		{name: "lone low surrogate marked", line: `{"t":"\uDC00","u":"ok"}`, field: "t", wantLone: true},
		{name: "high surrogate before a non-surrogate marked", line: `{"t":"\ud83d\u0041","u":"ok"}`, field: "t", wantLone: true},
		{name: "reversed pair marked", line: `{"t":"\ude00\ud83d","u":"ok"}`, field: "t", wantLone: true},
		{name: "lone surrogate on a repaired line marked", line: `{"t":"a\user \ud800","u":"ok"}`, repair: true, wantRepair: true, field: "t", wantLone: true},
		{name: "surrogate pair decoded", line: `{"t":"a\ud83d\ude00b"}`, field: "t", want: "a\U0001F600b"},
		{name: "escaped backslash before u is no escape", line: `{"t":"\\ud800"}`, field: "t", want: `\ud800`},
		{name: "escaped noncharacter is not taken as a marker", line: "{\"t\":\"a\xff\",\"u\":\"\\uFDD0\"}", field: "t", wantMarker: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj, marks, repaired, err := DecodeJSONLine([]byte(tc.line), tc.repair)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if repaired != tc.wantRepair {
				t.Errorf("repaired = %v, want %v", repaired, tc.wantRepair)
			}
			got := ""
			if n, ok := obj[tc.field].(json.Number); ok {
				got = n.String()
			} else {
				got, _ = obj[tc.field].(string)
			}
			if tc.wantMarker || tc.wantLone {
				marker, other := marks.Bytes, marks.Surrogate
				if tc.wantLone {
					marker, other = other, marker
				}
				if marker == "" || other != "" || !strings.Contains(got, marker) || strings.Contains(obj["u"].(string), marker) {
					t.Fatalf("marks %+q not where expected: t=%q u=%q", marks, got, obj["u"])
				}
				if strings.ContainsRune(got, utf8.RuneError) {
					t.Fatalf("t = %q holds U+FFFD", got)
				}
				return
			}
			if marks != (Marks{}) {
				t.Errorf("unexpected marks %+q", marks)
			}
			if got != tc.want {
				t.Errorf("%s = %q, want %q", tc.field, got, tc.want)
			}
		})
	}
}

// FuzzJSONLDecode feeds arbitrary bytes to the JSONL importer as a whole
// stream and to DecodeJSONLine, checking that nothing panics and every
// emitted document keeps the importer's invariants.
func FuzzJSONLDecode(f *testing.F) {
	f.Add([]byte(`{"id":"a","text":"hello","title":"T"}` + "\n" + `{"id":"b","text":["x","y"]}` + "\n"))
	f.Add([]byte(`{"id":"a","text":"a\user@example.org"}`))
	f.Add([]byte("{\"id\":\"a\",\"text\":\"\xff\xfe\"}\n\n{\"id\":1,\"text\":\"ok\"}"))
	f.Add([]byte(`{"id":"a","text":{"nested":1}}` + "\n" + `not json` + "\n" + `[1]`))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"))
	f.Add([]byte("\ufeff{\"id\":\"x\",\"text\":\"bom\"}\r\n"))
	f.Add([]byte(`{"id":"s","text":"t4\ud800x \ud83d\ude00 \\udc00"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if obj, marks, _, err := DecodeJSONLine(data, true); err == nil {
			if obj == nil {
				t.Fatal("nil object without error")
			}
			if marks.Bytes == "" && !utf8.Valid(data) {
				t.Fatal("invalid UTF-8 decoded without a marker")
			}
			if marks.Bytes != "" && marks.Bytes == marks.Surrogate {
				t.Fatalf("one stand-in %q for both kinds of invalid text", marks.Bytes)
			}
		}
		im, err := newImporter(ImportOptions{Paths: []string{"fuzz"}, IDPath: "id", TitlePath: "title", TextPaths: []string{"text"}, MaxDocBytes: 1 << 10},
			func(d schemas.CorpusDoc) error {
				if err := checkDoc(d); err != nil {
					t.Fatalf("emitted bad doc: %v", err)
				}
				if int64(len(d.Text)) > 1<<10 {
					t.Fatalf("doc over the cap: %d bytes", len(d.Text))
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		_ = im.importJSONL(context.Background(), "fuzz.jsonl", bytes.NewReader(data), false)
		rep := im.rep
		if rep.Read != rep.Imported+rep.Duplicates+rep.Skipped {
			t.Fatalf("accounting: %+v", rep)
		}
	})
}
