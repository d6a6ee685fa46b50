// Package archtest holds the tests of the repository's own rules, as
// docs/design.md "Layers" states them: which packages may import which
// (layers_test.go), that every package under stages/ is a stage, how large
// a source file or function may grow (size_test.go), and that every
// reference to a document in the tracked files names a file, heading or
// step that exists (refs_test.go). It has no code of its own; run it with
// go test ./internal/archtest.
package archtest
