package datasets

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParseFieldPath(t *testing.T) {
	tests := []struct {
		in      string
		want    string // canonical String(); "" means an error is expected
		wantErr string
	}{
		{in: "paper_id", want: "paper_id"},
		{in: "metadata.title", want: "metadata.title"},
		{in: "body_text[].text", want: "body_text[].text"},
		{in: "authors[0].name", want: "authors[0].name"},
		{in: "m[][2]", want: "m[][2]"},
		{in: `a\.b.c`, want: `a\.b.c`},
		{in: `we\[ird\]\\key`, want: `we\[ird\]\\key`},
		{in: "", wantErr: "empty path"},
		{in: "a..b", wantErr: "empty key"},
		{in: ".a", wantErr: "empty key"},
		{in: "a.", wantErr: "trailing '.'"},
		{in: "a[", wantErr: "unterminated"},
		{in: "a[x]", wantErr: "neither [] nor [N]"},
		{in: "a[-1]", wantErr: "neither [] nor [N]"},
		{in: "a[+1]", wantErr: "neither [] nor [N]"},
		{in: "[]", wantErr: "empty key"},
		{in: "a]", wantErr: "unexpected ']'"},
		{in: `a\`, wantErr: "dangling"},
		{in: "a[]b", wantErr: "expected '.' or '['"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			p, err := ParseFieldPath(tc.in)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadFieldPath) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFieldPath(%q) error = %v, want ErrBadFieldPath containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFieldPath(%q): %v", tc.in, err)
			}
			if got := p.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFieldPathExtract(t *testing.T) {
	const row = `{
		"paper_id": "2212.11867", "n": 42, "f": 1.5, "ok": true, "nul": null,
		"metadata": {"title": "Zeros", "tags": ["a", "b"], "obj": {"x": 1}},
		"body_text": [{"text": "p1"}, {"text": "p2"}, {"section": "no text"}, {"text": null}],
		"empty": [],
		"grid": [[1, 2], [3]],
		"a.b": "dotted",
		"parquet_list": {"list": [{"element": "e1"}, {"element": "e2"}]}
	}`
	var v any
	if err := json.Unmarshal([]byte(row), &v); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		want    []string
		found   bool
		wantErr error
	}{
		{"paper_id", []string{"2212.11867"}, true, nil},
		{"n", []string{"42"}, true, nil},
		{"f", []string{"1.5"}, true, nil},
		{"ok", []string{"true"}, true, nil},
		{"nul", nil, false, nil},
		{"missing", nil, false, nil},
		{"metadata.title", []string{"Zeros"}, true, nil},
		{"metadata.titel", nil, false, nil},
		{"metadata.tags", []string{"a", "b"}, true, nil},
		{"metadata.tags[1]", []string{"b"}, true, nil},
		{"metadata.tags[2]", nil, false, nil},
		{"metadata.obj", nil, true, errNotText},
		{"body_text[].text", []string{"p1", "p2"}, true, nil},
		{"body_text[0].text", []string{"p1"}, true, nil},
		{"body_text[].nope", nil, false, nil},
		{"empty[].text", nil, true, nil},
		{"grid[][]", []string{"1", "2", "3"}, true, nil},
		{"paper_id[]", nil, false, nil},
		{"paper_id.x", nil, false, nil},
		{`a\.b`, []string{"dotted"}, true, nil},
		{"parquet_list[]", []string{"e1", "e2"}, true, nil},
		{"parquet_list", []string{"e1", "e2"}, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			vals, found, err := MustParseFieldPath(tc.path).Extract(v)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if found != tc.found {
				t.Errorf("found = %v, want %v", found, tc.found)
			}
			if !reflect.DeepEqual(vals, tc.want) {
				t.Errorf("vals = %q, want %q", vals, tc.want)
			}
		})
	}
}

// FuzzFieldPath checks that the parser never panics and that the
// canonical form of any accepted path parses back to the same path.
func FuzzFieldPath(f *testing.F) {
	for _, s := range []string{"paper_id", "metadata.title", "body_text[].text", "a[0][]", `a\.b`, "a..b", "[", "x[99999999999999999999]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseFieldPath(s)
		if err != nil {
			if !errors.Is(err, ErrBadFieldPath) {
				t.Fatalf("error %v does not wrap ErrBadFieldPath", err)
			}
			return
		}
		canon := p.String()
		q, err := ParseFieldPath(canon)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", canon, s, err)
		}
		if !reflect.DeepEqual(p.steps, q.steps) {
			t.Fatalf("round trip of %q via %q changed the path", s, canon)
		}
		// Extract must not panic on any shape.
		var v any
		_ = json.Unmarshal([]byte(`{"a":[{"b":1},[2,{"c":"x"}]],"b":{"list":[{"element":null}]}}`), &v)
		_, _, _ = p.Extract(v)
	})
}

func TestDecimalString(t *testing.T) {
	for _, tc := range []struct{ lit, want, errHas string }{
		{lit: "7", want: "7"},
		{lit: "-12", want: "-12"},
		{lit: "0", want: "0"},
		{lit: "-0", want: "0"},
		{lit: "-0.000e7", want: "0"},
		{lit: "1e20", want: "100000000000000000000"},
		{lit: "1E+20", want: "100000000000000000000"},
		{lit: "12345678901234567890123", want: "12345678901234567890123"},
		{lit: "7.0", want: "7"},
		{lit: "0.7e1", want: "7"},
		{lit: "1.50", want: "1.5"},
		{lit: "2.50e-3", want: "0.0025"},
		{lit: "-1.5e-1", want: "-0.15"},
		{lit: "12.5e1", want: "125"},
		{lit: "0.001e3", want: "1"},
		{lit: "100e-2", want: "1"},
		{lit: "1e1000", want: "1" + strings.Repeat("0", 1000)},
		{lit: "1e1001", errHas: "exponent beyond ±1000"},
		{lit: "1e-99999999999999999999", errHas: "exponent beyond ±1000"},
		{lit: "1x", errHas: "not a JSON number"},
	} {
		got, err := decimalString(tc.lit)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: err = %v, want %q", tc.lit, err, tc.errHas)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v, want %q", tc.lit, got, err, tc.want)
		}
	}
}

func TestExtractNativeNumbers(t *testing.T) {
	v := map[string]any{"big": 1e20, "small": 1e-7, "f32": float32(0.1), "negzero": math.Copysign(0, -1),
		"int": int64(-42), "nan": math.NaN(), "inf": float32(math.Inf(1))}
	for _, tc := range []struct{ path, want, errHas string }{
		{path: "big", want: "100000000000000000000"},
		{path: "small", want: "0.0000001"},
		{path: "f32", want: "0.1"},
		{path: "negzero", want: "0"},
		{path: "int", want: "-42"},
		{path: "nan", errHas: "number NaN has no decimal form"},
		{path: "inf", errHas: "number +Inf has no decimal form"},
	} {
		vals, found, err := MustParseFieldPath(tc.path).Extract(v)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: err = %v, want %q", tc.path, err, tc.errHas)
			}
			continue
		}
		if err != nil || !found || len(vals) != 1 || vals[0] != tc.want {
			t.Errorf("%s: got %q, %v, %v, want %q", tc.path, vals, found, err, tc.want)
		}
	}
}
