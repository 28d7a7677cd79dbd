#!/usr/bin/env bash
# Installs what spattn needs on Debian or Ubuntu (run as root), for one of three purposes:
#   (no option)   build and test everything: the library, program, tests, benchmarks, fuzz targets,
#                 and the Python package with what tests it (pip: torch, transformers, ...)
#   --no-python   the same without the Python packages (scripts/run-fuzzers.sh)
#   --main-job    the library and the `spattn` program only (scripts/run-main-job.sh): a compiler,
#                 CMake, MPI and a BLAS; no GoogleTest, clang or Python packages
# Packages that are already present are not fetched again, so a prepared machine needs no network
# (torch from PyPI is large).
set -euo pipefail
purpose=tests
case "${1:-}" in
  "") ;;
  --no-python) purpose=no-python ;;
  --main-job) purpose=main-job ;;
  *) echo "install-dependencies.sh: unknown option '$1' (allowed: none, --no-python, --main-job)" >&2; exit 2 ;;
esac
has_nvcc=0
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then has_nvcc=1; fi

# OpenMP comes with GCC (libgomp); the BLAS package is OpenBLAS built with it.
packages=(build-essential cmake openmpi-bin libopenmpi-dev libopenblas-openmp-dev)
# The CUDA build finds the pip wheels' headers through python3 (cmake/FindCudnnFrontend.cmake,
# cmake/FindCutlass.cmake).
((has_nvcc)) && packages+=(python3)
# The tests: GoogleTest, and clang with its OpenMP for the fuzz targets (scripts/run-fuzzers.sh).
[[ $purpose == main-job ]] || packages+=(python3 libgtest-dev libgmock-dev clang libomp-dev)
# What oneCCL's CPU library needs (the oneccl transport, below): libfabric, its transport over TCP,
# and hwloc.
[[ $purpose == main-job ]] || packages+=(libfabric1 libhwloc-dev)

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
if [[ $purpose != main-job ]] &&
   ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "installing: libclang-rt-dev (libFuzzer)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libclang-rt-dev
fi

# The CUDA kernels (built only where nvcc is) use cuDNN's attention through the header-only
# cudnn-frontend; its pip wheel carries the headers (cmake/FindCudnnFrontend.cmake finds them).
if ((has_nvcc)); then
  python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['purelib'], 'include', 'cudnn_frontend.h')))" ||
    python3 -m pip install --quiet --no-deps nvidia-cudnn-frontend  # only its headers are used
  # spattn's own Hopper kernels are written with the header-only CUTLASS/CuTe of this wheel
  # (cmake/FindCutlass.cmake; scripts/device-run.sh carries the same version).
  python3 -c "import cutlass_library" 2>/dev/null ||
    python3 -m pip install --quiet --no-deps nvidia-cutlass==4.2.0.0
fi

# oneCCL, the Intel collective library behind the oneccl transport (CPU ranks; the transport an
# Intel GPU backend would take): its pip wheel carries the headers and a static library for CPUs,
# unpacked into /opt/oneccl-cpu (cmake/FindOneCCL.cmake). Skipped for the main job, which runs
# over MPI.
if [[ $purpose != main-job && ! -f /opt/oneccl-cpu/lib/libccl.a ]]; then
  wheels="$(mktemp -d)"
  # Without it (no network to PyPI) spattn builds without the oneccl transport (SPATTN_ONECCL=AUTO).
  python3 -m pip download --quiet --no-deps oneccl-cpu-devel==2022.2.0 -d "$wheels" ||
    echo "install-dependencies.sh: oneccl-cpu-devel could not be fetched; building without the oneccl transport" >&2
  ls "$wheels"/oneccl_cpu_devel-*.whl >/dev/null 2>&1 && python3 - "$wheels" /opt/oneccl-cpu <<'PY'
import glob, os, shutil, sys, zipfile
wheels, root = sys.argv[1:]
data = "oneccl_cpu_devel-2022.2.0.data/data/"
with zipfile.ZipFile(glob.glob(os.path.join(wheels, "oneccl_cpu_devel-*.whl"))[0]) as wheel:
    for name in wheel.namelist():
        if name.startswith(data + "include/"):
            target = os.path.join(root, name[len(data):])
        elif name == data + "lib/ccl/cpu/lib/libccl.a":  # the CPU build (lib/libccl.a is the SYCL one)
            target = os.path.join(root, "lib", "libccl.a")
        else:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with wheel.open(name) as source, open(target, "wb") as destination:
            shutil.copyfileobj(source, destination)
PY
  rm -rf "$wheels"
fi

[[ $purpose == tests ]] || exit 0

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
