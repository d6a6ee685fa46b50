package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
)

// OperationalTag is the struct tag that marks a setting Operational:
// `spade:"operational"` beside its yaml and json tags. The section that
// owns the setting says so on the field; nothing else lists it.
const OperationalTag = "operational"

// Operational lists, in Keys order, the settings that change how a run
// executes but not what it computes (the fields tagged OperationalTag);
// they are left out of Digest, so a run can be resumed with more workers
// or a longer timeout (docs/config.md).
var Operational = operationalKeys()

// operationalKeys walks Config for the fields tagged OperationalTag.
func operationalKeys() []string {
	var out []string
	walk(reflect.TypeOf(Config{}), "", func(k string, f reflect.StructField) {
		if f.Tag.Get("spade") == OperationalTag {
			out = append(out, k)
		}
	})
	return out
}

// pinner is a section with a rule of its own for the pinned config: pin
// returns the section as the digest sees it (its Operational settings
// already zeroed), typically blank where it holds the default of a
// setting added after runs were first pinned (its JSON field omitempty
// or omitzero), so the digest of a config that leaves the setting alone
// is the one it had before the setting existed.
type pinner interface{ pin() any }

// unpinner is the inverse of pinner for a section read back from a
// _RUN.json: unpin fills what pin blanked, and what a run file written
// before the setting existed leaves out, with the default.
type unpinner interface{ unpin() any }

// Pinned returns c with the Operational settings zeroed and each
// section's own pin rule applied (pinner; the sections' files hold
// them).
func (c Config) Pinned() Config {
	v := reflect.ValueOf(&c).Elem()
	zeroOperational(v)
	eachSection(v, func(s any) any {
		if p, ok := s.(pinner); ok {
			return p.pin()
		}
		return s
	})
	return c
}

// WithDefaults undoes the sections' pin rules (unpinner) on a config
// read back from a run file: it means what it meant when pinned, and its
// digest is unchanged (Digest pins it again).
func (c Config) WithDefaults() Config {
	eachSection(reflect.ValueOf(&c).Elem(), func(s any) any {
		if u, ok := s.(unpinner); ok {
			return u.unpin()
		}
		return s
	})
	return c
}

// zeroOperational zeroes every field of the struct v (addressable)
// tagged OperationalTag, in nested sections too.
func zeroOperational(v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		switch {
		case f.Tag.Get("spade") == OperationalTag:
			v.Field(i).SetZero()
		case f.Type.Kind() == reflect.Struct:
			zeroOperational(v.Field(i))
		}
	}
}

// eachSection replaces every section of the Config v (addressable) with
// fn of it; fn returns a value of the section's type.
func eachSection(v reflect.Value, fn func(any) any) {
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Struct {
			f.Set(reflect.ValueOf(fn(f.Interface())))
		}
	}
}

// Digest is the hex sha256 of the canonical JSON of the pinned config
// (Operational settings excluded); it pins a run's configuration.
func (c Config) Digest() string {
	return DigestOf(c.Pinned())
}

// DigestOf is the hex sha256 of the canonical JSON encoding of v (Go's
// encoding/json: struct fields in declaration order, map keys sorted).
func DigestOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("config: digest of unencodable value: " + err.Error())
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
