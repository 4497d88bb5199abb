# The two commands the README starts with are `make demo` and `make test`;
# both set up .venv/ first (cached: seconds after the first time).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup system-deps demo test test-short test-fast lint mutation-check bench soak bench-quick \
	bench-gpu bench-gpu-tables bundle

# nestor's own modules compiled to bytecode, as pip compiles an installed package's
# (an editable install is not): otherwise every process of a run (the driver, its
# MLflow projector, each Ray worker) compiles what it imports where
# PYTHONDONTWRITEBYTECODE is set. Only what changed is compiled again.
setup:
	@scripts/setup.sh
	@$(PY) -m compileall -q -j 0 orchestrator search trainers nestor >/dev/null

demo: setup
	@scripts/demo.sh

# The system packages the tests need (Slurm, Chromium, the Horovod build's
# compilers): installed when missing if run as root; otherwise it stops at once
# and prints the one command that installs them.
system-deps:
	@scripts/system-deps.sh

# ruff, the layers' contracts (import-linter) and the types (mypy: lenient on the whole of
# orchestrator/, search/ and trainers/, strict on the seams; pyproject's [tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# The whole set-up, then every test. The sub-make keeps the order (system
# packages before .venv, whose Horovod build needs cmake and g++) under -j too.
# Under CI (the CI variable set, as CI services do) a skipped test fails the run
# (tests/skip_policy.py). Then the mutation check (below): about a minute here at load
# 8-10 on 2 cores (67 s), so it runs with every `make test`. Then the short run
# (below) on a second Python and an older torch.
test: system-deps
	@$(MAKE) --no-print-directory lint
	$(PY) -m pytest
	$(PY) scripts/mutation_check.py
	@$(MAKE) --no-print-directory test-short

# The short run: the trainer, gang and search tests on another Python and torch than
# .venv's (3.11, torch 2.13), in a venv of their own that scripts/setup.sh builds
# (cached by its stamp; the Horovod wheel per Python and torch in ~/.cache/nestor).
# SHORT_PYTHON is 3.11, 3.12 or 3.13 (or a path); SHORT_TORCH is 2.13 or a version with a
# requirements-torchX.Y.lock (named apart from `make bundle`'s PYTHON and TORCH). `make test` runs the default, Python 3.12 with torch
# 2.11 (the image of a GPU node nestor ran on); the README lists what else was run.
SHORT_PYTHON := 3.12
SHORT_TORCH := 2.11
SHORT_VENV = .venv-py$(subst python,,$(notdir $(SHORT_PYTHON)))-torch$(SHORT_TORCH)
# In `make test` (CI's 90 minutes hold the full suite and this): every trainer test
# that is not slow, the slow ones that run the ranks' collectives and DDP
# (test_trainer_parallel), the warm gangs, and the search tests that are not slow.
# SHORT_TESTS=... runs what you name instead (the whole trainers, gangs and search
# tests: tests/trainers tests/backends/ray/test_gangs.py tests/search).
SHORT_TESTS := -m "not slow" tests/trainers tests/search
SHORT_SLOW := tests/trainers/test_trainer_parallel.py tests/backends/ray/test_gangs.py
test-short:
	@NESTOR_PYTHON=$(SHORT_PYTHON) NESTOR_TORCH=$(SHORT_TORCH) NESTOR_VENV=$(SHORT_VENV) scripts/setup.sh
	$(SHORT_VENV)/bin/python -m pytest $(SHORT_TESTS)
	$(if $(SHORT_SLOW),$(SHORT_VENV)/bin/python -m pytest $(SHORT_SLOW))

# Break the code behind the main guarantees (journal fsync and gate, adoption, resume's
# tell, the projector's batches, budget accounting) a line at a time, in a copy of the
# tree, and fail if the tests that stand for a guarantee let a breakage through
# (scripts/mutation_check.py; `--list` says what each breaks).
mutation-check: setup
	$(PY) scripts/mutation_check.py

# Everything but the tests marked slow; for a quick loop while editing.
test-fast: setup
	$(PY) -m pytest -m "not slow"

# Benchmarks: each prints its table and writes bench/results/*.json; the list and
# the sizes are in bench/steps.py, which gives every step of one run the same run id
# and records each step's wall time, CPU time and load in bench/results/bench-SIZE.json.
# Run them on a quiet machine. The full sizes take hours (the mnist5k searches on one
# slot-second budget alone, 7 searches x 5 seeds x 600 slot-s on 2 slots, about 3).
bench: setup
	$(PY) -m bench.steps full
	$(PY) -m bench.report
	$(PY) -m bench.report --check --same-run

# Every headline figure at small sizes, in one run on one machine; the goal is
# under 30 minutes on a quiet 2-core machine, and bench/REPORT.md's section on the
# run gives each step's wall and CPU time with the load it ran under. Each results
# file records its command, commit, machine, load and run id, and the report's
# --same-run check fails when the headline mixes runs or commits.
bench-quick: setup
	$(PY) -m bench.steps quick
	$(PY) -m bench.report
	$(PY) -m bench.report --check --same-run

# The five-minute GPU check (bench/gpu_check.py): the CUDA build and Ray's view of the
# GPU, the built-in trainers' throughput (fp32, bf16; data on the GPU or pinned), 4 trials
# packed on one GPU against one at a time, a sweep on the GPU, dp 2 over NCCL on two GPUs.
# Writes bench/results/gpu-check.json and renders its section of bench/REPORT.md. On a
# node without internet, from the bundle (README): BENCH_PY=the bundle's venv's python.
# `python -m bench.gpu_check --cpu` is its rehearsal on the CPU.
BENCH_PY ?= $(PY)
bench-gpu:
	@if [[ "$(BENCH_PY)" == "$(PY)" ]]; then $(MAKE) --no-print-directory setup; fi
	$(BENCH_PY) -m bench.gpu_check; rc=$$?; $(BENCH_PY) -m bench.report; exit $$rc

# The seed's tables on a GPU machine (nvidia-smi must find one), kept apart in
# bench/results/gpu-tables.json and their own section of bench/REPORT.md.
bench-gpu-tables: setup
	$(PY) -m bench.tables --gpu
	$(PY) -m bench.report

# The offline bundle for compute nodes without internet (README, "Cluster nodes without
# internet"; scripts/bundle.py): dist/nestor-bundle-cpXY.tar.xz for the node's Python (and
# -scientific.tar.xz: numpy, scipy, scikit-learn, matplotlib, for nodes without them),
# torch left out unless TORCH=include, Horovod only from a wheel built for the node.
#   make bundle PYTHON=3.12 [TORCH=preinstalled|include] [HOROVOD=path/to/horovod.whl]
PYTHON ?=
TORCH ?= preinstalled
HOROVOD ?=
# Needs only a Python 3.11+ with pip (.venv's where there is one; no set-up first).
BUNDLE_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
bundle:
	$(BUNDLE_PY) scripts/bundle.py --torch $(TORCH) $(if $(PYTHON),--python $(PYTHON)) \
		$(if $(HOROVOD),--horovod $(HOROVOD))

# The full kill soak: 200 trials of 2-rank Horovod jobs, a rank SIGKILLed every
# few seconds, the driver SIGKILLed 3 times and resumed (make test runs 40 / 1).
soak: setup
	NESTOR_SOAK_TRIALS=200 NESTOR_SOAK_DRIVER_KILLS=3 NESTOR_SOAK_RANK_KILL_S=10 $(PY) -m pytest tests/soak -s -q
