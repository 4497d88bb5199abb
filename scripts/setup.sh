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
#   NESTOR_PYTHON=3.12 ...        # the Python: 3.11 (default: python3), 3.12 or 3.13, as a
#                                 # version (found on PATH, in pyenv or uv) or a command/path
#   NESTOR_TORCH=2.11 ...         # another torch than 2.13: one with a requirements-torchX.Y.lock
#   NESTOR_VENV=path ...          # the venv to build (default .venv; `make test-short` uses
#                                 # .venv-py3.12-torch2.11 and the like)
#
# Flavour: where `nvidia-smi -L` lists a GPU, torch is PyPI's CUDA build
# (requirements-cuda.lock) and Horovod is built with HOROVOD_GPU_OPERATIONS=NCCL,
# against the system's NCCL or, where there is none, the nvidia-nccl-cu13 package
# torch itself depends on. Everywhere else (CI, this project's own machine) the
# CPU build (requirements.lock) and a Gloo-only Horovod, exactly as before.
#
# Python and torch: requirements.lock holds for Python 3.11, 3.12 and 3.13 alike. Only
# torch differs: the CPU wheel of torch 2.13 on this machine's disk is cp311, and PyPI has
# no CPU build for Linux x86_64, so elsewhere torch is PyPI's (CUDA) build, which runs on
# the CPU where there is no GPU: requirements-cuda.lock for torch 2.13 and
# requirements-torchX.Y.lock for an older torch, each installed in place of the lines of
# requirements.lock that name the same packages.
#
# Why Horovod is built here rather than installed: PyPI has no Horovod wheel,
# and the 0.28.1 sdist (the last release) pins C++14 while PyTorch 2.x headers
# need C++17. We patch the two CMake files and build a wheel once per
# (Horovod, torch, CPU/CUDA, Python) combination, cached outside the repository so
# that fresh clones reuse it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${NESTOR_VENV:-$repo/.venv}
[[ $venv == /* ]] || venv="$repo/$venv"
horovod_version=0.28.1
default_torch=2.13.0
cache_root=${NESTOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nestor}
supported_pythons="3.11 3.12 3.13"

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

# NESTOR_PYTHON as a version (3.12): python3.12 on PATH where it runs (pyenv's shim for a
# version that is installed but not selected does not), else pyenv's or uv's install.
find_python() {
    local want=$1 candidate root
    root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    for candidate in "python${want}" "$root/versions/${want}".*/bin/"python${want}"; do
        if "$candidate" -c '' >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    if command -v uv >/dev/null 2>&1; then
        uv python find --no-python-downloads "$want" 2>/dev/null && return 0
    fi
    return 1
}
python=${NESTOR_PYTHON:-python3}
if [[ $python =~ ^3\.[0-9]+$ ]] || { [[ $python =~ ^python3\.[0-9]+$ ]] && ! "$python" -c '' 2>/dev/null; }; then
    python=$(find_python "${python#python}") \
        || die "no Python ${NESTOR_PYTHON#python} found (python${NESTOR_PYTHON} on PATH, pyenv, uv); install one or set NESTOR_PYTHON to its path"
fi
py_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
    || die "NESTOR_PYTHON=${python} does not run"
[[ " $supported_pythons " == *" $py_version "* ]] \
    || die "Python 3.11, 3.12 or 3.13 is required, but ${python} is ${py_version}; set NESTOR_PYTHON to one (a version such as 3.12, or a path)"
py_tag=cp${py_version/./}

# NESTOR_TORCH: 2.13 (default) or a version with its own lock beside requirements.lock.
torch_want=${NESTOR_TORCH:-$default_torch}
torch_minor=$(cut -d. -f1,2 <<<"$torch_want")
torch_lock=""
if [[ $torch_minor != "${default_torch%.*}" ]]; then
    torch_lock="$repo/requirements-torch${torch_minor}.lock"
    if [[ ! -f $torch_lock ]]; then
        known=$(cd "$repo" && ls requirements-torch*.lock 2>/dev/null | sed 's/requirements-torch//; s/\.lock$//' | tr '\n' ' ' | sed 's/ $//')
        die "NESTOR_TORCH=${torch_want}: no requirements-torch${torch_minor}.lock; the torch versions set-up knows are ${default_torch%.*} (the default) ${known}"
    fi
    torch_version=$(sed -n 's/^torch===*//p' "$torch_lock")
else
    torch_version=$default_torch
fi
[[ $torch_want == "$torch_minor" || $torch_want == "$torch_version" ]] \
    || die "NESTOR_TORCH=${torch_want}, but the lock for torch ${torch_minor} pins ${torch_version}"

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

site="$venv/lib/python${py_version}/site-packages"
horovod_flags=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
               HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1)
problem=""
# The lock whose lines replace requirements.lock's of the same packages (torch first):
# none for the CPU wheel on disk (torch 2.13, cp311), else PyPI's build of the torch asked.
overlay=$torch_lock
if [[ -z $overlay && ( $flavour == cuda || $py_tag != cp311 ) ]]; then
    overlay="$repo/requirements-cuda.lock"
fi
if [[ -z $overlay ]]; then
    torch_pins=("torch==${torch_version}")   # the CPU wheel on disk (pip's find-links)
    lock_files=("$repo/requirements.lock")
else
    torch_pins=(-r "$overlay")
    lock_files=("$repo/requirements.lock" "$overlay")
fi
if [[ $flavour == cpu ]]; then
    nccl_source=none
else
    nccl_pin=$(grep -E '^nvidia-nccl-cu[0-9]+==' "$overlay")
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
# On a CPU machine, PyPI's torch and its CUDA libraries are kept on disk per torch,
# Python and lock (on a GPU node they are installed from the index, as before).
torch_wheels=""
if [[ -n $overlay && $flavour == cpu ]]; then
    torch_wheels="$cache_root/wheels/torch-${torch_version}-${py_tag}-$(sha256sum "$overlay" | cut -c1-12)"
fi
# cp311 wheels keep the name they had when 3.11 was the one Python.
py_suffix=""
[[ $py_tag != cp311 ]] && py_suffix="-${py_tag}"
wheel_dir="$cache_root/wheels/horovod-${horovod_version}-torch${torch_version}-${flavour}${nccl_tag}${py_suffix}"

if [[ $mode == plan ]]; then
    printf 'python=%s\n' "$python"
    printf 'python_version=%s\n' "$py_version"
    printf 'venv=%s\n' "$venv"
    printf 'gpus=%s\n' "$gpus"
    printf 'flavour=%s\n' "$flavour"
    printf 'reason=%s\n' "$reason"
    printf 'torch=%s\n' "${torch_pins[*]}"
    printf 'lock=%s\n' "${lock_files[@]#"$repo"/}"
    [[ -n $overlay ]] && grep -E '^[A-Za-z]' "$overlay" | sed 's/^/pin=/'
    printf 'nccl=%s\n' "$nccl_source"
    printf 'horovod_env=%s\n' "${horovod_flags[@]}"
    printf 'horovod_wheel_cache=%s\n' "$wheel_dir"
    [[ -n $torch_wheels ]] && printf 'torch_wheel_cache=%s\n' "$torch_wheels"
    [[ -n "$problem" ]] && printf 'problem=%s\n' "$problem"
    exit 0
fi
[[ -n "$problem" ]] && die "$problem"

stamp_inputs() {
    # Everything that should trigger a reinstall when it changes.
    cat "$repo/pyproject.toml" "${lock_files[@]}" "$repo/requirements-peers.lock" \
        "$repo/scripts/setup.sh"
    echo "$flavour $nccl_source $("$python" -c 'import sys; print(sys.version)')"
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
torch_build=$flavour
[[ $flavour == cpu && -n $overlay ]] && torch_build="PyPI's CUDA build, on the CPU"
log "installing torch ${torch_version} (${torch_build}) and the pinned dependencies"
if [[ -z $overlay ]]; then
    # torch first and by exact version so that the CPU wheel on disk (pip's
    # find-links) is used rather than the registry's CUDA build.
    quiet_pip install --quiet "${torch_pins[@]}"
    quiet_pip install --quiet -r "$repo/requirements.lock"
else
    # The overlay's pins replace the lock's lines of the same packages (its
    # torch==...+cpu among them); the rest is the same.
    if [[ -n $torch_wheels ]]; then
        # Some 3 GB of wheels (torch and the CUDA libraries it pins), kept so that a
        # fresh clone's short run (`make test-short`) installs them without the index.
        if [[ ! -d $torch_wheels ]]; then
            log "downloading torch ${torch_version} and what it pins into ${torch_wheels} (once)"
            rm -rf "${torch_wheels}.partial"
            quiet_pip download --quiet -d "${torch_wheels}.partial" -r "$overlay"
            mv "${torch_wheels}.partial" "$torch_wheels"
        fi
        quiet_pip install --quiet --no-index --find-links "$torch_wheels" -r "$overlay"
    else
        quiet_pip install --quiet "${torch_pins[@]}"
    fi
    "$venv/bin/python" "$repo/scripts/lock_overlay.py" "$repo/requirements.lock" "$overlay" \
        >"$venv/requirements-base.lock"
    quiet_pip install --quiet -r "$venv/requirements-base.lock" -r "$overlay"
fi
if [[ $flavour == cuda ]]; then
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
    log "building Horovod ${horovod_version} (${flavour}) against torch ${torch_version} for Python ${py_version}; once per machine, a few minutes"
    quiet_pip download --quiet --no-deps --no-binary :all: "horovod==${horovod_version}" -d "$work"
    tar -xzf "$work/horovod-${horovod_version}.tar.gz" -C "$work"
    local src="$work/horovod-${horovod_version}"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'set(CMAKE_CXX_STANDARD 17)' "$src/horovod/torch/CMakeLists.txt" \
        || die "the C++17 patch did not apply to horovod/torch/CMakeLists.txt"
    if [[ $flavour == cpu ]]; then
        # A CPU build against PyPI's (CUDA) torch: Horovod would build its torch
        # extension for CUDA wherever torch finds a CUDA toolkit (/usr/local/cuda),
        # and a toolkit that is not torch's fails to compile. Gloo only, as on cp311.
        sed -i 's/print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None)) else False)/print(False)/' \
            "$src/cmake/Modules/FindPytorch.cmake"
        grep -q 'CUDA_HOME; print(False)' "$src/cmake/Modules/FindPytorch.cmake" \
            || die "the CPU-only patch did not apply to cmake/Modules/FindPytorch.cmake"
    fi
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
log "ready: $venv (Python ${py_version}; torch ${torch_version} ${flavour}; Horovod ${horovod_version} with PyTorch, Gloo$([[ $flavour == cuda ]] && echo ", NCCL (${nccl_source})"))"
