# spade: see README.md. Every target works on a fresh Debian 12 machine after
# .ci/run's apt step (bubblewrap, python3-torch, chromium).
SHELL   := /bin/bash
GO      ?= go
N       ?= 1
SPADE   := bin/spade
ARGS    ?=
PYTHON  ?= /usr/bin/python3
GOLANGCI_LINT_VERSION := v2.15.0

.PHONY: all build round test test-go test-python test-race lint bench fuzz tools clean

all: build

build:
	$(GO) build -o $(SPADE) ./cmd/spade

## round: run (or resume) round N of the run, e.g. make round N=3 ARGS="--run exp1"
round: build
	./$(SPADE) round $(N) $(ARGS)

## test: every test the project has (Go, Python trainer), as CI runs them
test: test-go test-python

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

test-python:
	$(PYTHON) -m unittest discover -s trainer/tests

test-race:
	$(GO) test -race -count=1 -timeout 40m ./pipeline/... ./stages/sandbox/... ./stages/model/...

lint:
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

## bench: the benchmarks behind docs/benchmarks.md (internal/bench); results in
## .cache/bench/bench.{md,json}. BENCH_FULL=1 adds the 2,400-environment round;
## BENCH=Regexp selects benchmarks, e.g. make bench BENCH=Parquet
BENCH ?= .
bench: build
	mkdir -p .cache/bench
	set -o pipefail; $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -count 1 -timeout 180m ./internal/bench \
		-args -bench.spade=$(abspath $(SPADE)) -bench.json=$(abspath .cache/bench/bench.json) \
		-bench.md=$(abspath .cache/bench/bench.md) | tee bench.out

fuzz:
	./scripts/fuzz.sh

tools:
	$(GO) build -C tools -o ../.cache/bin/versitygw-v1.8.0 github.com/versity/versitygw/cmd/versitygw

clean:
	rm -rf bin .cache bench.out
