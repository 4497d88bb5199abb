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
	$(VENV)/bin/lint-imports

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
	$(PY) bench/auto_heldout_bench.py --seeds 5 --competitors tpe,gp,cmaes,ngopt
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

# Every headline figure at small sizes, in one run on one machine (each results
# file records its command, commit and machine; bench/REPORT.md says the sizes):
# the seed's tables (quick profile), 2,048 simulated slots (a quarter of the
# generations), 8 gangs on real Ray, overhead at 250 and 1,000 trials (Tune's
# default capped at 50), parallel: auto end to end at 2 seeds (not 5), the
# combined table simulated at 128 nodes, multi-fidelity on simulated training
# (20 seeds, seconds), sine-fit regret (10 seeds, not 20, six searches), auto on
# the held-out set (3 seeds, 60 trials; nevergrad's NGOpt only where installed)
# and the mnist5k searches at the quick size (2 seeds). The 30-minute goal was
# not timed end to end on a quiet machine: the parts' times are in their
# results files (started/finished).
bench-quick: setup
	$(PY) -m bench.tables --quick
	$(PY) -m bench.simulate --quick
	$(PY) bench/gang_start_bench.py --gangs 8
	$(PY) bench/orchestration_bench.py --parts overhead --trials 250,1000 --tune-new-actor-cap 50
	$(PY) bench/e2e_planning_bench.py --quick --seeds 2
	$(PY) -m bench.simulate_planning --quick
	$(PY) bench/multifidelity_bench.py --seeds 20
	$(PY) bench/auto_bench.py --seeds 10 --algorithms auto,random,cmaes-0,lq-cmaes,genetic,optuna-cmaes-1
	$(PY) bench/auto_heldout_bench.py --seeds 3 --budget 60
	$(PY) bench/search_fidelity_bench.py --quick
	$(PY) -m bench.report
	$(PY) -m bench.report --check

# The tables on a GPU machine (nvidia-smi must find one), kept apart in
# bench/results/gpu-tables.json and their own section of bench/REPORT.md.
bench-gpu: setup
	$(PY) -m bench.tables --gpu
	$(PY) -m bench.report

# The full kill soak: 200 trials of 2-rank Horovod jobs, a rank SIGKILLed every
# few seconds, the driver SIGKILLed 3 times and resumed (make test runs 40 / 1).
soak: setup
	NESTOR_SOAK_TRIALS=200 NESTOR_SOAK_DRIVER_KILLS=3 NESTOR_SOAK_RANK_KILL_S=10 $(PY) -m pytest tests/soak -s -q
