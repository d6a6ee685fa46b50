// Package bench measures the pipeline's own cost next to the alternatives a
// user would otherwise pick, as the work grows (docs/benchmarks.md): the
// sandbox against a process-per-call executor, the Parquet writer and
// reader against DuckDB, model-call orchestration against the ideal
// concurrency/latency rate, procedural rounds at 24, 240 and 2,400
// environments, and corpus sampling from a 1,000,000-document corpus on an
// S3-compatible server.
//
// The benchmarks themselves are Go benchmarks in this package's test files
// (they need testing.TB for the real S3 server and temporary directories);
// this file's package holds what they share and what is worth testing on
// its own: machine facts and load average, CPU accounting that includes
// every process a run started (killed sandboxes included), medians and the
// results report, the runner's stage-log parser, and deterministic
// generators of realistic rollouts and corpus documents.
//
// `make bench` runs them all and writes bench.json and bench.md; the
// figures in docs/benchmarks.md come from one such run.
package bench
