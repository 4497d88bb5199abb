#!/usr/bin/env bash
# Create or refresh .venv/ with nestor's pinned dependencies and a Horovod
# built against them. Idempotent and cached: the first run on a machine takes
# minutes (the Horovod build), later runs take seconds.
#
#   scripts/setup.sh              # set up or verify .venv
#   scripts/setup.sh --print-plan # say what it would install and build, change nothing
#   NESTOR_FORCE_SETUP=1 ...      # reinstall even if the stamp says it is current
#   NESTOR_TORCH_FLAVOUR=cpu ...  # or cuda: override what nvidia-smi decides (cuda on a
#                                 # login node without GPUs, for a venv GPU nodes share;
#                                 # it needs the CUDA toolkit, for Horovod's NCCL build)
#
# Flavour: where `nvidia-smi -L` lists a GPU, torch is PyPI's CUDA build
# (requirements-cuda.lock) and Horovod is built with HOROVOD_GPU_OPERATIONS=NCCL,
# against the system's NCCL or, where there is none, the nvidia-nccl-cu13 package
# torch itself depends on. Everywhere else (CI, this project's own machine) the
# CPU build (requirements.lock) and a Gloo-only Horovod, exactly as before.
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

mode=install
case "${1:-}" in
    "") ;;
    --print-plan) mode=plan ;;
    *) die "unknown option ${1}; the one option is --print-plan" ;;
esac

# --- what to install: decided here, printed by --print-plan -------------------------

# The flavour follows the GPU: nvidia-smi must be there AND list one (a node with
# the tool but no working driver lists none and gets the CPU build).
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]' || true)
fi
flavour=${NESTOR_TORCH_FLAVOUR:-}
case "$flavour" in
    "") flavour=cpu; (( gpus > 0 )) && flavour=cuda
        if [[ $flavour == cuda ]]; then
            reason="nvidia-smi lists ${gpus} GPU(s) on this node"
        else
            # The mistake to shout about: set-up on a login node for a venv that GPU
            # nodes share fills it with CPU torch, and every trial trains on the CPU.
            reason="nvidia-smi lists no GPU on this node; if this venv is for GPU nodes (set up on a login node), rerun with NESTOR_TORCH_FLAVOUR=cuda"
        fi ;;
    cpu|cuda) reason="NESTOR_TORCH_FLAVOUR=${flavour} (nvidia-smi lists ${gpus} GPU(s) here)" ;;
    *) die "NESTOR_TORCH_FLAVOUR must be cpu or cuda, but got '${flavour}'" ;;
esac

site="$venv/lib/python3.11/site-packages"
horovod_flags=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
               HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1)
problem=""
if [[ $flavour == cpu ]]; then
    torch_pins=("torch==${torch_version}")   # the CPU wheel on disk (pip's find-links)
    lock_files=("$repo/requirements.lock")
    nccl_source=none
else
    torch_pins=(-r "$repo/requirements-cuda.lock")
    lock_files=("$repo/requirements.lock" "$repo/requirements-cuda.lock")
    nccl_pin=$(grep -E '^nvidia-nccl-cu[0-9]+==' "$repo/requirements-cuda.lock")
    # CUDA 13's nvcc builds for compute capability 7.5 (Turing) and newer only;
    # Horovod's own default list starts at 3.5 and would fail to compile.
    horovod_flags+=(HOROVOD_GPU=CUDA HOROVOD_GPU_OPERATIONS=NCCL
                    "HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-75,80,86,89,90,100,120}")
    # The system's NCCL where it has one (a site's tuned build, NCCL_HOME from a
    # module); otherwise the pip package's, which torch loads anyway.
    if [[ -n "${HOROVOD_NCCL_HOME:-}" ]]; then
        nccl_source="env:${HOROVOD_NCCL_HOME}"
    elif [[ -n "${NCCL_HOME:-}" && -f "${NCCL_HOME}/include/nccl.h" ]]; then
        nccl_source="system:${NCCL_HOME}"
        horovod_flags+=("HOROVOD_NCCL_HOME=${NCCL_HOME}")
    elif [[ -f /usr/include/nccl.h ]] && ldconfig -p 2>/dev/null | grep -q 'libnccl\.so'; then
        nccl_source="system:/usr"
    else
        nccl_source="pip:${nccl_pin}"
        nccl_home="$site/nvidia/nccl"
        # The package ships libnccl.so.2 and no static library: link it shared
        # (Horovod links NCCL statically by default).
        horovod_flags+=("HOROVOD_NCCL_HOME=${nccl_home}" "HOROVOD_NCCL_INCLUDE=${nccl_home}/include"
                        "HOROVOD_NCCL_LIB=${nccl_home}/lib" HOROVOD_NCCL_LINK=SHARED)
    fi
    # Horovod's GPU operations compile CUDA kernels: the toolkit must be there.
    cuda_home=""
    for candidate in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda \
                     "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /nonexistent/bin/nvcc)")")")"; do
        if [[ -n "$candidate" && -x "$candidate/bin/nvcc" && -f "$candidate/include/cuda_runtime.h" ]]; then
            cuda_home=$candidate
            break
        fi
    done
    if [[ -n "$cuda_home" ]]; then
        horovod_flags+=("HOROVOD_CUDA_HOME=${cuda_home}")
    else
        problem="a GPU build of Horovod needs the CUDA toolkit (bin/nvcc, include/cuda_runtime.h): set CUDA_HOME or put nvcc on PATH (e.g. 'module load cuda'); or set NESTOR_TORCH_FLAVOUR=cpu for a CPU-only set-up"
    fi
fi
nccl_tag=""
[[ $flavour == cuda ]] && nccl_tag="-${nccl_source%%:*}"
wheel_dir="$cache_root/wheels/horovod-${horovod_version}-torch${torch_version}-${flavour}${nccl_tag}"

if [[ $mode == plan ]]; then
    printf 'gpus=%s\n' "$gpus"
    printf 'flavour=%s\n' "$flavour"
    printf 'reason=%s\n' "$reason"
    printf 'torch=%s\n' "${torch_pins[*]}"
    printf 'lock=%s\n' "${lock_files[@]#"$repo"/}"
    [[ $flavour == cuda ]] && grep -E '^[A-Za-z]' "$repo/requirements-cuda.lock" | sed 's/^/pin=/'
    printf 'nccl=%s\n' "$nccl_source"
    printf 'horovod_env=%s\n' "${horovod_flags[@]}"
    printf 'horovod_wheel_cache=%s\n' "$wheel_dir"
    [[ -n "$problem" ]] && printf 'problem=%s\n' "$problem"
    exit 0
fi
[[ -n "$problem" ]] && die "$problem"

stamp_inputs() {
    # Everything that should trigger a reinstall when it changes.
    cat "$repo/pyproject.toml" "${lock_files[@]}" "$repo/requirements-peers.lock" \
        "$repo/scripts/setup.sh"
    echo "$flavour $nccl_source"
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

log "=================================================================="
log "torch flavour: ${flavour^^}, because ${reason}"
log "=================================================================="
log "installing torch ${torch_version} (${flavour}) and the pinned dependencies"
if [[ $flavour == cpu ]]; then
    # torch first and by exact version so that the CPU wheel on disk (pip's
    # find-links) is used rather than the registry's CUDA build.
    quiet_pip install --quiet "${torch_pins[@]}"
    quiet_pip install --quiet -r "$repo/requirements.lock"
else
    # The CUDA pins replace the lock's torch==...+cpu line; the rest is the same.
    quiet_pip install --quiet "${torch_pins[@]}"
    grep -v '^torch==' "$repo/requirements.lock" >"$venv/requirements-no-torch.lock"
    quiet_pip install --quiet -r "$venv/requirements-no-torch.lock" -r "$repo/requirements-cuda.lock"
    if [[ $nccl_source == pip:* ]]; then
        [[ -f "$nccl_home/include/nccl.h" ]] \
            || die "${nccl_pin} is installed but has no include/nccl.h under $nccl_home"
        # Horovod's FindNCCL looks for libnccl.so; the package ships libnccl.so.2 only.
        [[ -e "$nccl_home/lib/libnccl.so" ]] || ln -s libnccl.so.2 "$nccl_home/lib/libnccl.so"
    fi
fi
# bench/'s peers that pin a requirement nestor's benches never use (Syne Tune's
# xgboost, which would bring a second NCCL): installed without their dependencies.
quiet_pip install --quiet --no-deps -r "$repo/requirements-peers.lock"

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
    local -a flags=("${horovod_flags[@]}")
    mkdir -p "$work/out"
    local path="$venv/bin:$PATH"
    [[ -n "${cuda_home:-}" ]] && path="$cuda_home/bin:$path"
    # CMake 4 refuses Gloo's cmake_minimum_required(2.8.12) unless told the oldest
    # policy version to assume; older CMake ignores the variable.
    if ! env "${flags[@]}" MAKEFLAGS="-j$(nproc)" PATH="$path" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
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
if [[ $flavour == cuda ]]; then
    grep -q '\[X\] NCCL' <<<"$check" || die "Horovod was built without NCCL: $check"
fi

echo "$want_stamp" >"$stamp_file"
log "ready: $venv (torch ${torch_version} ${flavour}; Horovod ${horovod_version} with PyTorch, Gloo$([[ $flavour == cuda ]] && echo ", NCCL (${nccl_source})"))"
