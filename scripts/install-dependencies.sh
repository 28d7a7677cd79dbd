#!/usr/bin/env bash
# Installs what spattn needs to build and test on Debian or Ubuntu (run as root), and the Python
# packages that build and test spattn's Python package (pip; left out with --no-python). Packages
# that are already present are not fetched again, so a prepared machine needs no network (torch
# from PyPI is large).
set -euo pipefail
with_python=1
[[ ${1:-} == --no-python ]] && with_python=0

# clang and its OpenMP build the fuzz targets (scripts/run-fuzzers.sh).
packages=(build-essential cmake pkg-config python3 openmpi-bin libopenmpi-dev libopenblas-openmp-dev
          libgtest-dev libgmock-dev clang libomp-dev)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# libFuzzer's runtime comes with clang, except on Debian 12 and Ubuntu 23.04 and later, where it
# is the package libclang-rt-dev: fetched only when a fuzz target does not link without it.
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "installing: libclang-rt-dev (libFuzzer)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libclang-rt-dev
fi

# The CUDA kernels (built only where nvcc is) use cuDNN's attention through the header-only
# cudnn-frontend; its pip wheel carries the headers (cmake/FindCudnnFrontend.cmake finds them).
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['purelib'], 'include', 'cudnn_frontend.h')))" ||
    python3 -m pip install --quiet --no-deps nvidia-cudnn-frontend  # only its headers are used
  # spattn's own Hopper kernels are written with the header-only CUTLASS/CuTe of this wheel
  # (cmake/FindCutlass.cmake; scripts/device-run.sh carries the same version).
  python3 -c "import cutlass_library" 2>/dev/null ||
    python3 -m pip install --quiet --no-deps nvidia-cutlass==4.2.0.0
fi

((with_python)) || exit 0

# The Python package (`pip install .`): scikit-build-core and nanobind build it, torch runs it,
# pytest (and numpy, which torch warns without) test it, transformers for spattn.huggingface's test.
# Each is installed only when missing.
python_modules=(torch nanobind scikit_build_core pytest numpy transformers)
python_packages=(torch nanobind scikit-build-core pytest numpy transformers)
missing_python=()
for i in "${!python_modules[@]}"; do
  python3 -c "import ${python_modules[$i]}" 2>/dev/null || missing_python+=("${python_packages[$i]}")
done
if ((${#missing_python[@]})); then
  echo "installing with pip: ${missing_python[*]}"
  python3 -m pip install --quiet --root-user-action=ignore "${missing_python[@]}"
fi
