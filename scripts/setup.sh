#!/usr/bin/env bash
# Create or refresh .venv/ with nestor's pinned dependencies and a Horovod
# built against them. Idempotent and cached: the first run on a machine takes
# minutes (the Horovod build), later runs take seconds.
#
#   scripts/setup.sh            # set up or verify .venv
#   NESTOR_FORCE_SETUP=1 ...    # reinstall even if the stamp says it is current
#
# Why Horovod is built here rather than installed: PyPI has no Horovod wheel,
# and the 0.28.1 sdist (the last release) pins C++14 while PyTorch 2.x headers
# need C++17. We patch the two CMake files and build a wheel once per
# (Horovod, torch, CPU/CUDA) combination, cached outside the repository so that
# fresh clones reuse it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
python=${NESTOR_PYTHON:-python3}
horovod_version=0.28.1
torch_version=2.13.0
cache_root=${NESTOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nestor}

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

"$python" - <<'PY' || die "Python 3.11 is required (torch ${torch_version} CPU wheel is cp311); set NESTOR_PYTHON to a python3.11"
import sys
sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)
PY

# NCCL only where a GPU and the CUDA compiler are present; the wheel is cached
# separately per flavour so a CPU build is never reused on a GPU machine.
flavour=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
    flavour=cuda
fi
wheel_dir="$cache_root/wheels/horovod-${horovod_version}-torch${torch_version}-${flavour}"

stamp_inputs() {
    # Everything that should trigger a reinstall when it changes.
    cat "$repo/pyproject.toml" "$repo/requirements.lock" "$repo/scripts/setup.sh"
    echo "$flavour"
}
want_stamp=$(stamp_inputs | sha256sum | cut -d' ' -f1)
stamp_file="$venv/.nestor-setup-stamp"

mkdir -p "$cache_root"
exec 9>"$cache_root/setup.lock"
flock 9   # two `make` targets started at once must not build twice

if [[ -z "${NESTOR_FORCE_SETUP:-}" && -f "$stamp_file" && "$(cat "$stamp_file")" == "$want_stamp" ]]; then
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    log "creating $venv"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# This machine's pip configuration lists local mirror folders that lack some
# packages; pip warns once per package. Keep real errors, drop that noise.
quiet_pip() {
    "${pip[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

log "installing torch ${torch_version} and the pinned dependencies"
# torch first and by exact version so that the CPU wheel on disk (pip's
# find-links) is used rather than the registry's CUDA build.
quiet_pip install --quiet "torch==${torch_version}"
quiet_pip install --quiet -r "$repo/requirements.lock"

build_horovod() {
    local work
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    log "building Horovod ${horovod_version} (${flavour}) against torch ${torch_version}; once per machine, a few minutes"
    quiet_pip download --quiet --no-deps --no-binary :all: "horovod==${horovod_version}" -d "$work"
    tar -xzf "$work/horovod-${horovod_version}.tar.gz" -C "$work"
    local src="$work/horovod-${horovod_version}"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'set(CMAKE_CXX_STANDARD 17)' "$src/horovod/torch/CMakeLists.txt" \
        || die "the C++17 patch did not apply to horovod/torch/CMakeLists.txt"
    local -a flags=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
                    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1)
    [[ $flavour == cuda ]] && flags+=(HOROVOD_GPU_OPERATIONS=NCCL)
    mkdir -p "$work/out"
    if ! env "${flags[@]}" MAKEFLAGS="-j$(nproc)" PATH="$venv/bin:$PATH" \
        "${pip[@]}" wheel --no-build-isolation --no-deps -w "$work/out" "$src" \
        >"$work/build.log" 2>&1; then
        tail -n 40 "$work/build.log" >&2
        die "the Horovod build failed (log above)"
    fi
    mkdir -p "$wheel_dir"
    mv "$work"/out/horovod-*.whl "$wheel_dir/"
}

if ! compgen -G "$wheel_dir/horovod-*.whl" >/dev/null; then
    build_horovod
else
    log "using the cached Horovod wheel in $wheel_dir"
fi
quiet_pip install --quiet --force-reinstall --no-deps "$wheel_dir"/horovod-*.whl

log "installing nestor (editable)"
quiet_pip install --quiet --no-deps --no-build-isolation -e "$repo"

check=$("$venv/bin/horovodrun" --check-build 2>&1) || die "horovodrun --check-build failed: $check"
grep -q '\[X\] PyTorch' <<<"$check" || die "Horovod was built without PyTorch: $check"
grep -q '\[X\] Gloo' <<<"$check" || die "Horovod was built without Gloo: $check"

echo "$want_stamp" >"$stamp_file"
log "ready: $venv (Horovod ${horovod_version} with PyTorch and Gloo, ${flavour})"
