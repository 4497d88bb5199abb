# The two commands the README starts with are `make demo` and `make test`;
# both set up .venv/ first (cached: seconds after the first time).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-fast lint bench

setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo.sh

lint: setup
	$(VENV)/bin/ruff check .

test: setup lint
	$(PY) -m pytest

# Everything but the tests marked slow; for a quick loop while editing.
test-fast: setup
	$(PY) -m pytest -m "not slow"

# Benchmarks: each prints its table and writes bench/results/*.json. Minutes,
# not seconds; run them on a quiet machine (numbers are compared side by side
# within one run).
bench: setup
	$(PY) bench/search_bench.py
	$(PY) bench/trainers_bench.py
	$(PY) bench/orchestration_bench.py
