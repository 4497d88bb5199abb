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
