# The two commands the README starts with are `make demo` and `make test`;
# both set up .venv/ first (cached: seconds after the first time).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup system-deps demo test test-fast lint bench soak bench-quick bench-gpu

setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo.sh

# The system packages the tests need (Slurm, Chromium, the Horovod build's
# compilers): installed when missing if run as root; otherwise it stops at once
# and prints the one command that installs them.
system-deps:
	@scripts/system-deps.sh

lint: setup
	$(VENV)/bin/ruff check .

# The whole set-up, then every test. The sub-make keeps the order (system
# packages before .venv, whose Horovod build needs cmake and g++) under -j too.
# Under CI (the CI variable set, as CI services do) a skipped test fails the run
# (tests/skip_policy.py).
test: system-deps
	@$(MAKE) --no-print-directory lint
	$(PY) -m pytest

# Everything but the tests marked slow; for a quick loop while editing.
test-fast: setup
	$(PY) -m pytest -m "not slow"

# Benchmarks: each prints its table and writes bench/results/*.json. Minutes,
# not seconds; run them on a quiet machine (numbers are compared side by side
# within one run). The mnist5k searches on one slot-second budget (7 searches x
# 5 seeds x 600 slot-s on 2 slots) take about 3 hours on their own.
bench: setup
	$(PY) bench/search_bench.py
	$(PY) bench/auto_suite_bench.py --budget 130 --parallel 2
	$(PY) bench/auto_suite_bench.py --budget 100 --parallel 8
	$(PY) bench/auto_bench.py --seeds 20 --algorithms auto,random,tpe,cmaes-10,cmaes-0,lq-cmaes,genetic,genetic-async,optuna-cmaes-1
	$(PY) bench/trainers_bench.py
	$(PY) bench/backend_bench.py
	$(PY) bench/orchestration_bench.py
	$(PY) -m bench.tables
	$(PY) -m bench.simulate
	$(PY) bench/gang_start_bench.py
	$(PY) bench/planning_bench.py
	$(PY) bench/e2e_planning_bench.py
	$(PY) -m bench.simulate_planning
	$(PY) bench/multifidelity_bench.py --seeds 20
	$(PY) bench/search_fidelity_bench.py
	$(PY) -m bench.report

# The seed's tables, overhead (steady state over 1,000 trials; Tune's default,
# about a second a trial, capped at 50) and 2,048 simulated slots at small sizes
# (about 10 minutes on 2 quiet cores; bench/REPORT.md says which sizes); parallel:
# auto against the hand-picked shapes through nestor run, 3 seeds (12 nestor runs:
# 28 minutes on these 2 shared cores at load 11-28); the seed's combined table
# simulated at 128 nodes (seconds); the simulated multi-fidelity table at 5 seeds
# (seconds) and the mnist5k searches on one slot-second budget at the quick size
# (about 12 minutes; 2 seeds, not 5).
bench-quick: setup
	$(PY) -m bench.tables --quick
	$(PY) -m bench.simulate --quick
	$(PY) bench/gang_start_bench.py --gangs 8
	$(PY) bench/orchestration_bench.py --parts overhead --trials 250,1000 --tune-new-actor-cap 50
	$(PY) bench/e2e_planning_bench.py --quick
	$(PY) -m bench.simulate_planning --quick
	$(PY) bench/multifidelity_bench.py --seeds 5
	$(PY) bench/search_fidelity_bench.py --quick
	$(PY) -m bench.report

# The tables on a GPU machine (nvidia-smi must find one), kept apart in
# bench/results/gpu-tables.json and their own section of bench/REPORT.md.
bench-gpu: setup
	$(PY) -m bench.tables --gpu
	$(PY) -m bench.report

# The full kill soak: 200 trials of 2-rank Horovod jobs, a rank SIGKILLed every
# few seconds, the driver SIGKILLed 3 times and resumed (make test runs 40 / 1).
soak: setup
	NESTOR_SOAK_TRIALS=200 NESTOR_SOAK_DRIVER_KILLS=3 NESTOR_SOAK_RANK_KILL_S=10 $(PY) -m pytest tests/soak -s -q
