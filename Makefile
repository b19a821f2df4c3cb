# Run `make help` for the list of targets. Every target sets up .venv itself on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
DEMO_DIR ?= demo-data
CLUSTER_DIR ?= cluster-data
PYTEST_ARGS ?=
# pytest-xdist workers of the test targets: one per core, at most 4 (each worker starts its own
# moto S3, PostgreSQL and Spark JVM when its tests need them); JOBS=0 runs in one process.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))
# loadgroup: tests marked xdist_group("serial") (tests/conftest.py) run one after another on
# one worker; the rest are dealt out as workers free up
XDIST = -n $(JOBS) --dist loadgroup
# The developer loops run one worker more than the cores: their tests wait (leases, expiries,
# polls) about a quarter of their time, and a third worker fills those waits (make test-quick on
# 2 cores at load 1-2: 71.6 s with 2 workers, 57.0-61.4 s with 3)
DEV_JOBS ?= $(shell echo $$(( $(JOBS) > 0 ? $(JOBS) + 1 : 0 )))
DEV_XDIST = -n $(DEV_JOBS) --dist loadgroup
# make test-quick: the engine's unit tests, without servers, Spark, the slatedb wheel, the
# simulation, the crash points or the applications (tests/conftest.py sets the folder markers)
QUICK := not slow and not s3 and not postgres and not spark and not slatedb and not interop \
	and not sim and not crash and not apps
# and not even collected (the crash points are enumerated at collection: 20 s of a 1-min loop)
SYSTEM_DIRS := crash sim interop
QUICK_SKIP := $(addprefix --ignore=tests/,$(SYSTEM_DIRS) spark orchestration lakehouse_demo \
	cluster devtools docs)
# make test-fast: the engine and the applications (Dagster, the demo, the CLI) without servers,
# Spark, slow tests or the whole-system suites, which make test-system runs (and make test, CI)
SYSTEM := crash or sim or interop or slatedb
FAST := not slow and not s3 and not postgres and not spark and not ($(SYSTEM))
# The developer loops (test-quick, test-fast) draw a quarter of each hypothesis test's examples
# (tests/hypothesis_profile.py); make test and CI draw every one. HYPOTHESIS=ci: every one here too.
HYPOTHESIS ?= dev
# pytest caches its rewritten test modules as bytecode: a shell with PYTHONDONTWRITEBYTECODE set
# recompiles all of them in every worker of every run (6-8 s of CPU per worker); the test targets
# write the caches (__pycache__/, ignored by git)
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest

.DEFAULT_GOAL := help

help: ## Show this help
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "} {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,spark,orchestration,s3server]'
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP) ## Create .venv and install the project with its dev tools

demo: $(STAMP) ## The main job: Spark ingest, compaction, checkpoint, rescale, GC, Delta export via Dagster (ROWS=, ARGS=--reuse, DEMO_DIR=)
	$(BIN)/python -m lakehouse_demo --dir $(DEMO_DIR) $(if $(ROWS),--rows $(ROWS)) $(ARGS)
	$(if $(findstring --s3,$(ARGS))$(findstring --store-url,$(ARGS)),,$(BIN)/slatedb --url $(DEMO_DIR)/store --path orders table shards)

demo-s3: $(STAMP) ## The main job against a real S3 server (SeaweedFS weed mini on 127.0.0.1)
	$(BIN)/python -m lakehouse_demo --dir $(DEMO_DIR)-s3 --s3

sim: $(STAMP) ## Seeded simulation campaign: make sim N=10000
	$(BIN)/python -m tests.sim.run --schedules $(or $(N),10000) --workers 2

test: $(STAMP) ## The default test run (under 12 min on 2 cores, in parallel): everything but the slow suites; CI runs both
	$(PYTEST) -q $(XDIST) -m "not slow" --durations=25 $(PYTEST_ARGS)

test-slow: $(STAMP) ## The slow suites (heavy HTTP faults, the demo twice, dagster dev); CI runs them too
	$(BIN)/pytest -q -m slow $(PYTEST_ARGS)

test-fast: $(STAMP) ## The engine and applications, no servers, Spark, slow or whole-system suites (83 s on 2 cores)
	SLATEDB_HYPOTHESIS=$(HYPOTHESIS) $(PYTEST) -q $(DEV_XDIST) -m "$(FAST)" \
	  $(addprefix --ignore=tests/,$(SYSTEM_DIRS)) $(PYTEST_ARGS)

test-system: $(STAMP) ## The whole-system suites: crash points, simulation, interop with the slatedb wheel (in make test)
	$(PYTEST) -q $(XDIST) -m "($(SYSTEM)) and not slow" $(PYTEST_ARGS)

test-quick: $(STAMP) ## The developer loop (about 1 min on 2 cores): engine unit tests, no servers, Spark, interop, sim
	SLATEDB_HYPOTHESIS=$(HYPOTHESIS) $(PYTEST) -q $(DEV_XDIST) -m "$(QUICK)" $(QUICK_SKIP) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint and format), strict mypy, the import contracts (import-linter) and the structure figures
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy slatedb_core spark_jobs orchestration devtools lakehouse_demo
	$(BIN)/lint-imports
	$(BIN)/python tools/structure.py

bench: $(STAMP) ## All benchmarks (print figures; see bench/README.md); several minutes
	$(BIN)/python -m pip install -q -e '.[dev,spark,orchestration,bench]'
	$(BIN)/python bench/manifest_bench.py
	$(BIN)/python bench/sst_bench.py
	$(BIN)/python bench/merge_bench.py
	$(BIN)/python bench/engine_bench.py --rows 200000
	$(BIN)/python bench/compaction_bench.py --rows 1000000
	$(BIN)/python bench/gc_bench.py
	$(BIN)/python bench/reader_bench.py

cluster: $(STAMP) ## The deployment's real services on 127.0.0.1: SeaweedFS, PostgreSQL, Spark master + 2 workers, Dagster webserver + daemon, fleet exporter + Prometheus (infra/README.md)
	$(BIN)/python -m lakehouse_demo.cluster start --dir $(CLUSTER_DIR)

cluster-status: $(STAMP) ## One line per service of make cluster: up or DOWN
	$(BIN)/python -m lakehouse_demo.cluster status --dir $(CLUSTER_DIR)

cluster-stop: $(STAMP) ## Stop what make cluster started, and what a killed make cluster/cluster-test left in any folder
	$(BIN)/python -m lakehouse_demo.cluster stop --dir $(CLUSTER_DIR) --orphans

cluster-test: $(STAMP) ## Its own cluster on free ports, driven end to end: spark-submit ingest, daemon runs, kills (~15 min; in test-slow)
	$(BIN)/pytest -q tests/cluster $(PYTEST_ARGS)

ui: $(STAMP) ## Dagster UI on http://127.0.0.1:3000 with sample databases (one pass of every asset, fleet_sensor history)
	$(BIN)/python -m lakehouse_demo.workdir $(DEMO_DIR)
	$(BIN)/python -m devtools.devserver $(CURDIR)/$(DEMO_DIR)/dagster_home
	DAGSTER_HOME=$(CURDIR)/$(DEMO_DIR)/dagster_home SLATEDB_STORE_URL=$(DEMO_DIR)/dagster-store \
	  $(BIN)/python -m devtools.sample_data --dir $(DEMO_DIR)/dagster-store --register --materialize
	DAGSTER_HOME=$(CURDIR)/$(DEMO_DIR)/dagster_home SLATEDB_STORE_URL=$(DEMO_DIR)/dagster-store \
	  $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

screenshot: $(STAMP) ## Retake docs/img/{asset_graph,fleet_view,fleet_trend}.png: sample data, dagster dev, headless Chromium (OUT=dir/asset_graph.png)
	@command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	$(BIN)/python -m devtools.screenshot --out $(or $(OUT),docs/img/asset_graph.png)

crash: $(STAMP) ## Crash-point tests: every store call of every operation, killed before and after
	$(BIN)/pytest -q tests/crash -m "not s3"
	$(BIN)/python -m tests.crash.report

api-docs: $(STAMP) ## The API reference (pdoc, from docstrings) as HTML in build/api-docs: slatedb_core's public API, the Spark data source
	rm -rf build/api-docs
	$(BIN)/pdoc -o build/api-docs slatedb_core '!slatedb_core\.' slatedb_core.admin slatedb_core.errors \
	  slatedb_core.fleet slatedb_core.health slatedb_core.layout spark_jobs.datasource
	@echo "open build/api-docs/index.html"

fuzz: $(STAMP) ## Long decoder fuzz campaign (N inputs over every decoder, default 100000)
	$(BIN)/python -m tests.fuzz.run --inputs $(or $(N),100000)

clean: ## Remove caches and demo data (keeps .venv; run make cluster-stop before removing a cluster)
	rm -rf $(DEMO_DIR) .pytest_cache .ruff_cache .mypy_cache .hypothesis

.PHONY: help setup demo demo-s3 sim test test-slow test-fast test-quick test-system lint bench cluster \
	cluster-status cluster-stop cluster-test ui screenshot crash fuzz clean api-docs
