package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
)

// Keys lists every setting's dotted YAML path, in declaration order.
func Keys() []string {
	var out []string
	walk(reflect.TypeOf(Config{}), "", func(k string, _ reflect.StructField) { out = append(out, k) })
	return out
}

// Get returns the value of a dotted key, formatted for display.
func (c Config) Get(key string) string {
	v, ok := lookup(reflect.ValueOf(&c).Elem(), key)
	if !ok {
		return ""
	}
	b, _ := json.Marshal(v.Interface())
	return string(b)
}

// walk calls fn with the dotted key and the struct field of every
// setting of t (a section type, or Config) under prefix, in declaration
// order; sections are walked into, not passed to fn.
func walk(t reflect.Type, prefix string, fn func(string, reflect.StructField)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		if f.Type.Kind() == reflect.Struct {
			walk(f.Type, key, fn)
			continue
		}
		fn(key, f)
	}
}

func lookup(v reflect.Value, key string) (reflect.Value, bool) {
	for _, part := range strings.Split(key, ".") {
		t := v.Type()
		found := false
		for i := 0; i < t.NumField(); i++ {
			if strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0] == part {
				v = v.Field(i)
				found = true
				break
			}
		}
		if !found {
			return v, false
		}
	}
	return v, v.Kind() != reflect.Struct
}

func envKey(name string) (string, bool) {
	want := strings.TrimPrefix(name, "SPADE_")
	for _, k := range Keys() {
		if strings.ToUpper(strings.ReplaceAll(k, ".", "_")) == want {
			return k, true
		}
	}
	return "", false
}

// NearestKey returns the setting (a dotted key of Keys) or section (a
// prefix of one, such as "model") that an unknown dotted key most likely
// misspells, or "" when none is close: the one at the smallest Levenshtein
// distance, within 1 edit for a key under 4 bytes, 2 under 12, else 3
// (a swap of two letters is 2; ties go to the first in sorted order);
// failing that, the one
// setting whose last part equals the key's (a setting put in the wrong
// section, "model.group_size" for "rollout.group_size"). Names of the
// field's vocabulary are short and differ in more than a letter, so a
// typo lands on one of them and an unrelated word on none.
func NearestKey(key string) string {
	keys := Keys()
	var cands []string
	seen := map[string]bool{}
	for _, k := range keys {
		parts := strings.Split(k, ".")
		for i := 1; i <= len(parts); i++ {
			c := strings.Join(parts[:i], ".")
			if !seen[c] {
				seen[c] = true
				cands = append(cands, c)
			}
		}
	}
	if best := nearest(key, cands); best != "" {
		return best
	}
	leaf := key[strings.LastIndexByte(key, '.')+1:]
	var same []string
	for _, k := range keys {
		if k != key && k[strings.LastIndexByte(k, '.')+1:] == leaf {
			same = append(same, k)
		}
	}
	if len(same) == 1 {
		return same[0]
	}
	return ""
}

// nearestEnv is NearestKey for a SPADE_* variable that names no setting:
// the variable of the closest setting, or "".
func nearestEnv(name string) string {
	var cands []string
	for _, k := range Keys() {
		cands = append(cands, EnvName(k))
	}
	return nearest(name, cands)
}

// nearest returns the candidate closest to s by Levenshtein distance when
// it is within 1 edit (s under 4 bytes), 2 (under 12) or 3, else "".
// Equal distances go to the first candidate in sorted order, so the
// answer is stable.
func nearest(s string, cands []string) string {
	limit := 1
	switch {
	case len(s) >= 12:
		limit = 3
	case len(s) >= 4:
		limit = 2
	}
	sorted := slices.Clone(cands)
	slices.Sort(sorted)
	best, bestD := "", limit+1
	for _, c := range sorted {
		if c == s {
			continue
		}
		if d := levenshtein.ComputeDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// EnvName returns the environment variable that overrides key.
func EnvName(key string) string {
	return "SPADE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Show returns every setting with its value and source, sorted by key, as
// lines "key = value  (source)".
func Show(c Config, src Source) []string {
	keys := Keys()
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s = %s  (%s; env %s)", k, c.Get(k), src[k], EnvName(k)))
	}
	return out
}
