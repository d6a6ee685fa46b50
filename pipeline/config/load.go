package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Source says where each setting's value came from: "default", the file
// path, or the environment variable name.
type Source map[string]string

// Load builds the config: defaults, then the YAML file (if path != ""),
// then SPADE_* variables from environ. Errors wrap ErrInvalid and name the
// file, line and key, or the variable.
func Load(path string, environ []string) (Config, Source, error) {
	cfg := Default()
	src := Source{}
	lines := map[string]int{} // key -> its line in the file
	for _, k := range Keys() {
		src[k] = "default"
	}
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return cfg, src, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		// The node tree first: its checks name the setting and the line in
		// words, where yaml.v3's decode errors name Go types.
		var node yaml.Node
		if err := yaml.Unmarshal(data, &node); err != nil {
			return cfg, src, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		if node.Kind == yaml.DocumentNode && len(node.Content) == 1 && node.Content[0].Kind != yaml.MappingNode && node.Content[0].ShortTag() != "!!null" {
			return cfg, src, fmt.Errorf("%w: %s: line %d: the file must be a mapping of settings (key: value), not %s", ErrInvalid, path, node.Content[0].Line, nodeWhat(node.Content[0]))
		}
		var bad []string
		nbad := 0
		w := &setWalker{fn: func(k string, kn, vn *yaml.Node) {
			src[k], lines[k] = path, kn.Line
			if msg := nodeProblem(k, vn); msg != "" {
				if nbad++; len(bad) < maxListedProblems {
					bad = append(bad, fmt.Sprintf("line %d: %s", kn.Line, msg))
				}
			}
		}}
		if err := w.walk(&node, ""); err != nil {
			return cfg, src, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		if nbad > len(bad) {
			bad = append(bad, fmt.Sprintf("and %d more", nbad-len(bad)))
		}
		if len(bad) > 0 {
			return cfg, src, fmt.Errorf("%w: %s: %s", ErrInvalid, path, strings.Join(bad, "; "))
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			// Unknown keys and type mismatches were named above; what is
			// left is yaml.v3's own error, passed on as it is.
			return cfg, src, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		var extra yaml.Node
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			return cfg, src, fmt.Errorf("%w: %s: holds more than one YAML document (a second starts at a --- line); spade reads exactly one", ErrInvalid, path)
		}
	}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "SPADE_") {
			continue
		}
		key, ok := envKey(name)
		if !ok {
			if isConfigVar(name) {
				if near := nearestEnv(name); near != "" {
					return cfg, src, fmt.Errorf("%w: environment variable %s names no setting (did you mean %s? settings: see spade config show)", ErrInvalid, name, near)
				}
				return cfg, src, fmt.Errorf("%w: environment variable %s names no setting (settings: see spade config show)", ErrInvalid, name)
			}
			continue
		}
		if err := setPath(&cfg, key, val); err != nil {
			return cfg, src, fmt.Errorf("%w: environment variable %s: %w", ErrInvalid, name, err)
		}
		src[key] = name
		delete(lines, key)
	}
	if probs := cfg.problems(); len(probs) > 0 {
		texts := make([]string, len(probs))
		for i, p := range probs {
			texts[i] = p.Text + setWhere(p.Keys, src, lines)
		}
		return cfg, src, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(texts, "; "))
	}
	return cfg, src, nil
}

// MaxFileBytes bounds a config file (a real one is about 2 KB): a path
// such as /dev/zero, or a huge file passed by mistake, would otherwise be
// read into memory without end.
const MaxFileBytes = 1 << 20

// readFile reads a config file of at most MaxFileBytes. Pipes (--config
// <(...)) and devices are read as files are.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err // a *fs.PathError: "read PATH: is a directory"
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: the file is over %d bytes; a config file holds a few dozen settings", path, MaxFileBytes)
	}
	return data, nil
}

// setWhere says where the first of keys not left at its default was set:
// " (spade.yaml line 3)", " (SPADE_SAMPLE_SLOTS)", or "" for defaults.
func setWhere(keys []string, src Source, lines map[string]int) string {
	for _, k := range keys {
		switch where := src[k]; {
		case where == "" || where == "default":
			continue
		case lines[k] > 0:
			return fmt.Sprintf(" (%s line %d)", where, lines[k])
		default:
			return " (" + where + ")"
		}
	}
	return ""
}

// CLIVars lists the SPADE_* variables that configure the command line
// rather than the run, so Load leaves them alone: the store, run, config
// file and log flags' defaults, SPADE_SHARD, the "i/n" shard the
// generated Airflow DAG gives each mapped task (docs/operations.md), and
// SPADE_VENV, SPADE_AIRFLOW_VENV and SPADE_CACHE, the Python environments
// and model cache that the Makefile exports to every recipe (make round
// included). Any other SPADE_* variable must name a setting.
var CLIVars = []string{"SPADE_STORE", "SPADE_RUN", "SPADE_CONFIG", "SPADE_LOG_FORMAT", "SPADE_LOG_LEVEL", "SPADE_SHARD", "SPADE_VENV", "SPADE_AIRFLOW_VENV", "SPADE_CACHE"}

func isConfigVar(name string) bool { return !slices.Contains(CLIVars, name) }

func setPath(c *Config, key, val string) error {
	v, ok := lookup(reflect.ValueOf(c).Elem(), key)
	if !ok {
		return fmt.Errorf("unknown setting %s", key)
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(val)
	case reflect.Int, reflect.Int64:
		if !decimalRe.MatchString(val) {
			return fmt.Errorf("%s wants a decimal integer without leading zeros, got %q", key, val)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return fmt.Errorf("%s wants an integer, got %q", key, val)
		}
		v.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("%s wants a number, got %q", key, val)
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("%s wants true or false, got %q", key, val)
		}
		v.SetBool(b)
	case reflect.Slice:
		var parts []string
		for _, p := range strings.Split(val, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("%s cannot be set from the environment", key)
	}
	return nil
}

// decimalRe is the one spelling of an integer setting, in YAML and in
// the SPADE_* variables alike: decimal digits, an optional sign, no
// leading zero (YAML 1.1 would read 024 as octal 20, ParseInt as 24).
var decimalRe = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// nodeProblem says what is wrong with the YAML value vn of the dotted key,
// in words, or "": an unknown key; a null (yaml.v3 would keep the
// default); a section given a value; a float for an integer (yaml.v3
// would truncate seed: 1.5 to 1); a value of the wrong type.
func nodeProblem(key string, vn *yaml.Node) string {
	t, ok := fieldType(key)
	if !ok {
		if near := NearestKey(key); near != "" {
			return fmt.Sprintf("unknown setting %q (did you mean %q? settings: see spade config show)", key, near)
		}
		return fmt.Sprintf("unknown setting %q (settings: see spade config show)", key)
	}
	if vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!null" {
		return key + " has no value (null); remove the key to keep the default"
	}
	tag := vn.ShortTag()
	switch t.Kind() {
	case reflect.Struct:
		return fmt.Sprintf("%s is a section: write its settings under it, one per line (got %s)", key, nodeWhat(vn))
	case reflect.Slice:
		if vn.Kind != yaml.SequenceNode {
			return fmt.Sprintf("%s wants a list, e.g. [a, b] (got %s)", key, nodeWhat(vn))
		}
	case reflect.Int, reflect.Int64:
		// yaml.v3 resolves an integer past int64 as !!float, so this also
		// catches seed: 99999999999999999999.
		if vn.Kind != yaml.ScalarNode || tag != "!!int" {
			return fmt.Sprintf("%s wants an integer (got %s)", key, nodeWhat(vn))
		}
		if !decimalRe.MatchString(vn.Value) {
			return fmt.Sprintf("%s wants a decimal integer without leading zeros (got %s; YAML would read it as octal, hexadecimal or binary, the SPADE_* variables as decimal, so spade accepts neither)", key, nodeWhat(vn))
		}
	case reflect.Float64:
		if vn.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
			return fmt.Sprintf("%s wants a number (got %s)", key, nodeWhat(vn))
		}
		if tag == "!!int" && !decimalRe.MatchString(vn.Value) {
			return fmt.Sprintf("%s wants a decimal number without leading zeros (got %s; YAML would read it as octal, hexadecimal or binary)", key, nodeWhat(vn))
		}
	case reflect.Bool:
		if vn.Kind != yaml.ScalarNode || tag != "!!bool" {
			return fmt.Sprintf("%s wants true or false (got %s)", key, nodeWhat(vn))
		}
	case reflect.String:
		if vn.Kind != yaml.ScalarNode {
			return fmt.Sprintf("%s wants a text value (got %s)", key, nodeWhat(vn))
		}
	}
	return ""
}

// nodeWhat describes a YAML node for a message: `"abc"`, a list, a mapping.
func nodeWhat(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(n.Value)
}

// fieldType is the Go type of the setting or section at the dotted key.
func fieldType(key string) (reflect.Type, bool) {
	t := reflect.TypeOf(Config{})
	for _, part := range strings.Split(key, ".") {
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			if strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0] == part {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return t, true
}

// maxSettingVisits bounds the key: value pairs, and the entries of merge
// lists, one file may expand to through aliases and merge keys (a real
// config has about 50). Nested merges of merges (a: &a {...}, b: &b
// {<<: [*a, *a, ...]}, ...) grow exponentially: a few hundred bytes would
// otherwise expand to billions of settings. Merge-list entries count too:
// lists of aliases of an empty mapping set nothing, yet merged through
// each other they cost time all the same (a 214 KB file took a minute).
const maxSettingVisits = 1 << 14

// setWalker calls fn for every setting of a YAML tree, in file order:
// keys of nested mappings are joined with dots; aliases and merge keys
// (<<) are followed.
type setWalker struct {
	fn     func(key string, keyNode, valueNode *yaml.Node)
	onPath map[*yaml.Node]bool // the mappings being walked
	visits int
}

// visit counts one setting or merge-list entry at line, and fails once
// the file has expanded past maxSettingVisits of them.
func (w *setWalker) visit(line int) error {
	if w.visits++; w.visits > maxSettingVisits {
		return fmt.Errorf("line %d: aliases expand the file to more than %d settings (or merge-list entries)", line, maxSettingVisits)
	}
	return nil
}

// walk walks n under the dotted prefix. A mapping reached again through
// an alias inside itself (sample: &a {<<: *a}) would recurse without
// end, and aliases that expand past maxSettingVisits settings would
// take time and memory without bound: both are errors naming the line.
func (w *setWalker) walk(n *yaml.Node, prefix string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := w.walk(c, prefix); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		if w.onPath == nil {
			w.onPath = map[*yaml.Node]bool{}
		}
		w.onPath[n] = true
		defer delete(w.onPath, n)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			if err := w.visit(kn.Line); err != nil {
				return err
			}
			for vn.Kind == yaml.AliasNode && vn.Alias != nil {
				vn = vn.Alias // key: *anchor
			}
			if w.onPath[vn] {
				return fmt.Errorf("line %d: an alias refers to a mapping that contains it (an anchor that includes itself)", kn.Line)
			}
			if kn.ShortTag() == "!!merge" {
				// <<: *anchor (or a list of them) merges mappings here.
				if err := w.walk(vn, prefix); err != nil {
					return err
				}
				continue
			}
			key := kn.Value
			if prefix != "" {
				key = prefix + "." + key
			}
			if vn.Kind == yaml.MappingNode {
				if err := w.walk(vn, key); err != nil {
					return err
				}
			} else {
				w.fn(key, kn, vn)
			}
		}
	case yaml.SequenceNode: // the anchors of a merge list
		for _, c := range n.Content {
			line := c.Line
			if err := w.visit(line); err != nil {
				return err
			}
			for c.Kind == yaml.AliasNode && c.Alias != nil {
				c = c.Alias
			}
			if c.Kind != yaml.MappingNode {
				continue
			}
			if w.onPath[c] {
				return fmt.Errorf("line %d: an alias refers to a mapping that contains it (an anchor that includes itself)", line)
			}
			if err := w.walk(c, prefix); err != nil {
				return err
			}
		}
	}
	return nil
}
