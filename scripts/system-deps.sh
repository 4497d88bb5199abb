#!/usr/bin/env bash
# The system packages `make test` needs, installed on a fresh Debian machine.
#
#   scripts/system-deps.sh      # as root: install what is missing, then exit 0
#                               # not as root: if anything is missing, print the one
#                               # command that installs it and exit 1 at once
#
# `make test` runs this first, before .venv is built, so a fresh clone on a
# fresh machine needs nothing but `make test` (as root) to pass; `.ci/run`
# calls `make test` and nothing more. Each command is looked up on PATH and,
# when absent, mapped to the Debian package that provides it:
#
#   make, cmake, g++          build Horovod (scripts/setup.sh)
#   python3 with venv, dev    Python 3.11, its venv module and headers (Horovod's build)
#   flock (util-linux)        setup.sh's lock; mount/umount for the disk-full test
#   pgrep (procps)            tests that check no process is left behind
#   slurmctld, munged         the local Slurm of tests/slurm (slurm-wlm, munge)
#   chromium, chromedriver    the browser test of `nestor ui` (chromium, chromium-driver)
#
# Nothing is installed when nothing is missing, so a second run takes
# milliseconds. NESTOR_PYTHON names the Python to check (as setup.sh does).
set -euo pipefail

python=${NESTOR_PYTHON:-python3}

# command:package pairs, in the order they are reported.
pairs=(
    make:make cmake:cmake g++:g++ flock:util-linux pgrep:procps
    slurmctld:slurm-wlm munged:munge chromium:chromium chromedriver:chromium-driver
)

missing=()
add() {
    local package
    for package in "$@"; do
        [[ " ${missing[*]-} " == *" $package "* ]] || missing+=("$package")
    done
}

for pair in "${pairs[@]}"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || add "${pair#*:}"
done
if ! command -v "$python" >/dev/null 2>&1; then
    add python3 python3-venv python3-dev
else
    "$python" -c 'import ensurepip, venv' >/dev/null 2>&1 || add python3-venv
    "$python" - >/dev/null 2>&1 <<'PY' || add python3-dev
import os, sys, sysconfig
sys.exit(0 if os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
fi

((${#missing[@]} == 0)) && exit 0

install="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=600 ${missing[*]}"
if [[ ${EUID} != 0 ]]; then
    {
        echo "make test: this machine lacks ${missing[*]}."
        echo "Install them (once), then run make test again:"
        echo
        echo "    sudo sh -c '${install}'"
        echo
        echo "(Or run make test as root, which installs them itself.)"
    } >&2
    exit 1
fi

echo "[system-deps] installing ${missing[*]}" >&2
sh -c "${install}"
