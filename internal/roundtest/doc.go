// Package roundtest holds the integration tests of whole SPADE rounds: it
// runs rounds 1..8 of a small procedural config, three rounds on the
// imported unarXive sample and three rounds with the PyTorch trainer, on a
// local file store, and checks the round invariants with SQL through
// pipeline/sqlview (DuckDB): labels recomputed from rollouts, memory FIFO,
// admission by the learnable band, pools carried by reference, unique and
// reproducible play seeds, GRPO advantages, checkpoint lineage. It also
// runs every query of docs/cookbook.md and checks that docs/tables.md
// describes every column of every table.
//
// The package has no non-test code; the tests share the runs they produce
// (one run per config, made once per test binary).
package roundtest
