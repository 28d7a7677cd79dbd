#!/usr/bin/env bash
# Builds spattn with its CUDA kernels on a GPU machine and runs every test there, stage by stage:
#   environment  nvidia-smi, nvcc, cmake, compilers, MPI, compute-sanitizer, what was found
#   build        googletest from source if no package has it, then cmake -DSPATTN_CUDA=ON, Release
#   softmax-overlap  scripts/check-softmax-overlap.py on the own kernels' objects: in the SASS of
#                every key loop the softmax runs beside O's product (softmax-overlap.log)
#   gpu-tests    spattn_gpu_tests (the CUDA kernels against the CPU kernels); a test that needs more
#                GPUs than the machine has may skip, any other skip fails the stage
#                (SPATTN_GPU_TESTS_FILTER, a --gtest_filter, narrows them)
#   conformance  spattn_conformance's CUDA rows (every BlockKernels operation of kernels own and cudnn against the fp64
#                reference; conformance.log) and the same cases' throughput (conformance-perf.log;
#                SPATTN_CONFORMANCE_PERF_ARGS, default --scale 32)
#   memcheck     the same under compute-sanitizer --tool memcheck (skipped where it is missing)
#   racecheck    the same under compute-sanitizer --tool racecheck (shared-memory hazards)
#   synccheck    the own kernels' tests under compute-sanitizer --tool synccheck (barrier misuse)
#   ctest        the whole CTest suite: CPU unit tests, mpirun tests at 1..8 ranks, GPU tests
#                (SPATTN_CTEST_REGEX, when set, runs only the tests it matches)
#   sweep        `spattn run --device cuda --check --backward` for every strategy, causal and not,
#                at SPATTN_SWEEP_RANKS ranks (default 1 2 3 8) over the machine's GPUs; with
#                SPATTN_SWEEP_DOC_LENS=L1,L2,... on those packed documents (scripts/check-sweep.sh);
#                SPATTN_SWEEP_KERNEL=own|cudnn passes --kernel (default: automatic); sweep-summary.txt
#                has one line per run ending in PASS, FAIL or ERROR with its worst error ratio;
#                SPATTN_SWEEP_JOBS runs (default 4) go at once
#   timeline     `spattn run --timeline` of each of SPATTN_TIMELINE_ALGOS (default zigzag hamilton ulysses)
#                at one rank per GPU (SPATTN_TIMELINE_ARGS: the shape; default causal 8k tokens per GPU,
#                GQA 32/8, D 128, own kernels, forward and backward): timeline-ALGO.{csv,md,png}
#   forward-sweep  the same without --backward (out and lse only), for each --kernel in
#                SPATTN_SWEEP_KERNELS (default own cudnn): forward-sweep-KERNEL.log
#   faults       StalledRankOnGpus and PlanMemoryOnGpus at one rank per GPU, kernel modules loaded
#                eagerly as PlanMemoryOnGpus needs (SPATTN_FAULTS_FILTER, a gtest filter, narrows
#                them), then, with two GPUs or more, `spattn run` over NCCL
#                with a rank killed or stalled (SPATTN_FAULT) for SPATTN_PROGRAM_FAULTS (default
#                zigzag ulysses hamilton) (faults.log)
#   python-gpu   SPATTN_CUDA=ON pip install . and pytest tests/python_gpu under torchrun at 1 and
#                every GPU, then bench/python_call_overhead.py at each (python-build.log,
#                python-gpu-N.log, python-overhead.log)
#   bench        spattn_gpu_bench on every GPU (bench.csv, bench.log; SPATTN_BENCH_ARGS adds options,
#                e.g. --kernel own,cudnn for both kernels' rows; with torch-bench in the same call
#                PyTorch's context_parallel comes beside them in bench.md)
#   kernel-bench one attention on one GPU by kernel and pass (forward, backward, forward+backward):
#                spattn_kernel_bench (own, cudnn) and bench/kernel_sdpa.py (PyTorch SDPA flash, cudnn)
#                into kernel-bench.csv, drawn into kernel-bench.md and .png, a table and a row of
#                panels per pass (SPATTN_KERNEL_BENCH_ARGS: options both take, e.g. --seqs, --passes);
#                with SPATTN_KERNEL_SUSTAIN_S=S each (pass, kernel) of spattn_kernel_bench runs alone
#                for S seconds instead (--sustain: the rate under the power cap; PyTorch's rows left
#                out), and kernel-power.md sets each beside the power and clock sampled meanwhile
#                (bench/power_by_window.py)
#   kernel-profile  ncu on one spattn_kernel_bench case, own and cuDNN kernels (kernel-profile.txt;
#                SPATTN_PROFILE_ARGS: the case, default --seqs 8192 --head-dims 128 --causal yes;
#                SPATTN_PROFILE_PASS: forward, the default, or backward), and the own kernel's stall
#                samples per SASS instruction (own-kernel-source.csv.gz)
#   kernel-ab    the own kernel as built (base) against the same tree with each patch of
#                SPATTN_AB_PATCHES applied in turn (only spattn_kernel_bench rebuilt per patch):
#                every build's kernel bench runs SPATTN_AB_ROUNDS times (default 3), the builds
#                taking turns, into VARIANT.csv (kernel-ab-csv.tar.gz) and one table, kernel-ab.md
#                (bench/compare_kernel_variants.py), a row per pass, case and own kernel with its
#                ratios to the base and to cuDNN where it ran, then cuDNN's rows, which no patch
#                changes, and how far they moved between builds: the noise (SPATTN_KERNEL_BENCH_ARGS: --passes
#                forward for the forward alone, --kernels own,own_merge,cudnn). The patches are
#                reverted afterwards.
#   bench-ab     the same for the distributed bench: spattn_gpu_bench of each build at every GPU
#                (SPATTN_BENCH_ARGS), the builds taking turns SPATTN_AB_ROUNDS times, into one table,
#                bench-ab.md (bench/compare_bench_variants.py: each row's median TFLOP/s per GPU and
#                its ratio to the base's), and VARIANT.csv (bench-ab-csv.tar.gz). Both A/B stages
#                also run the base build once per entry of SPATTN_AB_ENVS (space-separated, each
#                NAME=VALUE[,NAME=VALUE...], e.g. "NCCL_CTA_POLICY=1 NCCL_MAX_CTAS=8") with those
#                variables set: a library's setting A/B'd without a patch
#   torch-bench  PyTorch's context_parallel on every GPU into the same bench.csv (torch.log;
#                TORCH_BENCH_ARGS adds options, '|' between the option sets of separate runs);
#                bench.md and bench.png then plot both
# SPATTN_DEVICE_STAGES picks the stages after the build (default: softmax-overlap gpu-tests conformance
# memcheck racecheck synccheck ctest sweep).
# A failing stage does not stop the later ones; the exit status is non-zero when any failed.
# Logs go to $OUT (the device tool brings them back), or to build-device/logs when OUT is unset:
# environment.log, build.log, gpu-tests.log, memcheck.log, racecheck.log, ctest.log,
# ctest-output.log (every test's output), sweep.log, bench.*, clocks-STAGE.csv (the GPUs' clocks, power
# and throttle reasons every 200 ms during bench, kernel-bench, kernel-ab and bench-ab, summed up in a
# `clocks` line),
# summary.txt (one line per stage with its passed/failed/skipped counts).
#
# Usage, on the device machine from the repository root:  bash scripts/device-run.sh
# Its image may lack GoogleTest or OpenBLAS and can fetch nothing. Then, once, on a machine that
# has them (Debian/Ubuntu packages libgtest-dev/googletest and libopenblas-dev):
#   bash scripts/device-run.sh --prepare-deps
# which copies their sources/libraries, the cudnn-frontend headers (pip nvidia-cudnn-frontend) and
# the nvidia-cutlass wheel (CUTLASS/CuTe headers, unpacked on the device) into build-cuda-deps/
# (ignored by git, ~52 MB); name that
# folder in the device tool's `carry` and this script uses it where the machine has none.
# SPATTN_DEVICE_BUILD_DIR (default build-device) is where it builds; SPATTN_BUILD_TARGETS, when
# set, builds only those targets (e.g. spattn_kernel_bench for a kernel-ab call); SPATTN_CMAKE_ARGS adds
# configure options (e.g. -DSPATTN_HOPPER_HEAD_DIMS=128: half the kernel units, a shorter build
# for a call whose cases all have head dim 128). SPATTN_DEVICE_BUDGET_S
# (default 570) bounds the whole run: the device tool stops a command after 600 s, and a stage
# cut short by the budget still leaves its log and summary line. SPATTN_RUN_LIMIT_S, when set,
# bounds each test or bench command (not the builds): for a kernel that may hang.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps_dir="$root/build-cuda-deps"

# The CUTLASS/CuTe headers of the own Hopper kernels: the version scripts/install-dependencies.sh installs.
cutlass_version=4.2.0.0

# ---- --prepare-deps: run where the packages are installed, not on the device machine ----------
prepare_deps() {
  set -e
  rm -rf "$deps_dir"
  mkdir -p "$deps_dir/openblas/lib" "$deps_dir/openblas/include"
  cp -r /usr/src/googletest "$deps_dir/googletest"
  local openblas cblas_header
  # awk reads to the end (no early exit): an early exit can end the writer by SIGPIPE, which
  # pipefail and set -e turn into a silent failure of the whole preparation.
  openblas="$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ && !found {print $NF; found = 1}')"
  [[ -n "$openblas" ]] || { echo "no libopenblas.so.0 here: install libopenblas-dev first"; exit 1; }
  # One copy under the soname; the device run adds the libopenblas.so link (links may not travel).
  cp -L "$openblas" "$deps_dir/openblas/lib/libopenblas.so.0"
  for needed in libgfortran.so.5 libquadmath.so.0; do
    cp -L "$(ldd "$openblas" | awk -v lib="$needed" '$1 == lib {print $3}')" "$deps_dir/openblas/lib/"
  done
  cblas_header="$(echo '#include <cblas.h>' | g++ -x c++ -E -H - 2>&1 >/dev/null | awk '/cblas\.h$/ && !found {print $2; found = 1}')"
  cp -L "$(dirname "$(readlink -f "$cblas_header")")"/*.h "$deps_dir/openblas/include/"
  # cudnn-frontend (header-only) for the cuDNN attention: the pip wheel's headers.
  local frontend_include
  frontend_include="$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/include"
  [[ -f "$frontend_include/cudnn_frontend.h" ]] ||
    { echo "no cudnn_frontend.h in $frontend_include: pip install nvidia-cudnn-frontend first"; exit 1; }
  mkdir -p "$deps_dir/cudnn-frontend/include"
  cp -r "$frontend_include"/cudnn_frontend* "$frontend_include"/cudnn_backend_base.h "$deps_dir/cudnn-frontend/include/"
  # CUTLASS/CuTe (header-only) for the own Hopper kernels: the pip wheel itself (6 MB; its 27 MB
  # of unpacked headers would not fit in what a device call carries), unpacked by the device run.
  mkdir -p "$deps_dir/wheels"
  python3 -m pip download --quiet --no-deps --dest "$deps_dir/wheels" "nvidia-cutlass==$cutlass_version"
  du -sh "$deps_dir"
  echo "carry build-cuda-deps with the device tool's run"
}
if [[ "${1:-}" == "--prepare-deps" ]]; then
  prepare_deps
  exit 0
fi

# ---- the device run ------------------------------------------------------------------------------
build_dir="${SPATTN_DEVICE_BUILD_DIR:-$root/build-device}"
logs="${OUT:-$build_dir/logs}"
mkdir -p "$logs"
summary="$logs/summary.txt"
: >"$summary"
jobs="$(nproc)"
budget_s="${SPATTN_DEVICE_BUDGET_S:-570}"
any_failed=0
stages=" ${SPATTN_DEVICE_STAGES:-softmax-overlap gpu-tests conformance memcheck racecheck synccheck ctest sweep} "
# wants STAGE: STAGE was asked for and the budget has time left to begin it (else its summary line
# says the budget was spent, so a stage never starts with a one-second timeout and reads as failed).
wants() {
  [[ "$stages" == *" $1 "* ]] || return 1
  ((budget_s - SECONDS >= 15)) && return 0
  record "$1" skipped "the ${budget_s}s budget was spent before it began"
  return 1
}

# mpirun refuses root unless told; the GPU machines run commands as root. NVLink multicast stays
# off on shared hosts (KINDS.md).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# record STAGE STATUS DETAIL: one summary line, echoed so the tool's output tail shows it too.
record() {
  printf '%-12s %-8s %s\n' "$1" "$2" "$3" | tee -a "$summary"
  [[ "$2" == failed ]] && any_failed=1
  return 0
}

# Seconds of the budget left, at least 1 (timeout 0 would mean no limit at all): the limit of a build.
budget_left() {
  local left=$((budget_s - SECONDS))
  echo $((left < 1 ? 1 : left))
}

# The limit of one test or bench command: the budget left, and at most SPATTN_RUN_LIMIT_S when set,
# so that a kernel that hangs costs that much of the call and the later stages still run.
seconds_left() {
  local left
  left="$(budget_left)"
  echo $((${SPATTN_RUN_LIMIT_S:-left} < left ? ${SPATTN_RUN_LIMIT_S:-left} : left))
}

# clock_samples_start NAME ... clock_samples_stop: every GPU's SM clock, power, temperature and the
# reasons its clock is held down, every 200 ms, into clocks-NAME.csv; the stop records one summary
# line of the samples under load (bench/clock_samples.py: median and lowest SM clock, power, how
# often the power cap held the clock down), so that a slower run can be told from a lower clock:
# on the H200s at full load the 700 W cap takes the clock from 1980 to 1600-1750 MHz a third to
# half of the time (2026-11-28).
clock_sampler=""
clock_samples_start() {
  command -v nvidia-smi >/dev/null || return 0
  local reasons=clocks_event_reasons.active
  nvidia-smi --help-query-gpu 2>/dev/null | grep -q "$reasons" || reasons=clocks_throttle_reasons.active
  clock_stage=$1
  nvidia-smi --query-gpu="timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons" \
    --format=csv,noheader,nounits -lms 200 >"$logs/clocks-$clock_stage.csv" 2>/dev/null &
  clock_sampler=$!
}
clock_samples_stop() {
  [[ -n "$clock_sampler" ]] || return 0
  kill "$clock_sampler" 2>/dev/null
  wait "$clock_sampler" 2>/dev/null
  clock_sampler=""
  record clocks sampled "$clock_stage: $(python3 "$root/bench/clock_samples.py" "$logs/clocks-$clock_stage.csv")"
}

# The counts of a GoogleTest log: "passed=N failed=N skipped=N".
# skips_not_for_gpu_count LOG: the skipped tests of LOG other than those that need more GPUs than
# the machine has (their message: "needs two GPUs, has 1").
skips_not_for_gpu_count() {
  local skipped for_gpus
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)"
  for_gpus="$(grep -cE '^needs [a-z0-9]+ GPUs, has [0-9]+' "$1")"
  echo $((${skipped:-0} - for_gpus))
}

gtest_counts() {
  local passed failed skipped
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)"
  failed="$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)"
  echo "passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}"
}

# ---- environment -------------------------------------------------------------------------------------
{
  echo "== date: $(date -u)   host: $(hostname)   cores: $jobs"
  for probe in "nvidia-smi" "nvcc --version" "cmake --version" "g++ --version" "mpirun --version" \
               "compute-sanitizer --version"; do
    echo "== $probe"
    $probe 2>&1 || echo "(not available)"
  done
  echo "== libraries the build needs"
  ldconfig -p | grep -E 'libopenblas|libgtest|libmpi\.so|libcudnn\.so|libnccl\.so' || true
  ls /usr/src/googletest 2>/dev/null | head -3 || true
  [[ -d "$deps_dir" ]] && echo "carried dependencies: $(ls "$deps_dir")"
} >"$logs/environment.log" 2>&1
if nvidia-smi >/dev/null 2>&1 && command -v nvcc >/dev/null; then
  record environment passed "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nvcc --version | grep -o 'release [0-9.]*')"
else
  record environment failed "nvidia-smi or nvcc missing: see environment.log"
fi

# ---- build ---------------------------------------------------------------------------------------------
built=0
# A brace group, not a subshell: the paths exported for a carried OpenBLAS stay for the tests.
{
  cmake_arguments=(-DCMAKE_BUILD_TYPE=Release -DSPATTN_CUDA=ON)
  read -r -a extra_cmake_arguments <<<"${SPATTN_CMAKE_ARGS:-}"
  cmake_arguments+=("${extra_cmake_arguments[@]}")
  prefix_path=()

  # GoogleTest: a package if there is one, else sources (the image's, or carried ones), built here.
  if ! compgen -G '/usr/lib*/cmake/GTest/GTestConfig.cmake' >/dev/null &&
     ! compgen -G '/usr/lib/*/cmake/GTest/GTestConfig.cmake' >/dev/null &&
     ! compgen -G '/usr/local/lib*/cmake/GTest/GTestConfig.cmake' >/dev/null; then
    gtest_source=""
    for candidate in "${SPATTN_GTEST_SOURCE:-}" /usr/src/googletest "$deps_dir/googletest"; do
      [[ -n "$candidate" && -f "$candidate/CMakeLists.txt" ]] && { gtest_source="$candidate"; break; }
    done
    if [[ -z "$gtest_source" ]]; then
      echo "ERROR: no GoogleTest package and no sources (/usr/src/googletest or a carried build-cuda-deps/)."
      echo "       The tests need GoogleTest: run 'bash scripts/device-run.sh --prepare-deps' on a machine"
      echo "       with libgtest-dev and carry build-cuda-deps."
    else
      echo "== building GoogleTest from $gtest_source"
      cmake -S "$gtest_source" -B "$build_dir/googletest-build" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$build_dir/googletest" -DBUILD_GMOCK=ON -DINSTALL_GTEST=ON &&
        cmake --build "$build_dir/googletest-build" -j "$jobs" &&
        cmake --install "$build_dir/googletest-build" && prefix_path+=("$build_dir/googletest")
    fi
  fi

  # OpenBLAS: the system's, else the carried copy (headers, library, its Fortran runtime).
  if ! ldconfig -p | grep -q 'libopenblas\.so'; then
    if [[ -f "$deps_dir/openblas/lib/libopenblas.so.0" ]]; then
      echo "== using the carried OpenBLAS in $deps_dir/openblas"
      ln -sf libopenblas.so.0 "$deps_dir/openblas/lib/libopenblas.so"
      prefix_path+=("$deps_dir/openblas")
      export CPATH="$deps_dir/openblas/include${CPATH:+:$CPATH}"
      export LIBRARY_PATH="$deps_dir/openblas/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
      export LD_LIBRARY_PATH="$deps_dir/openblas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
      echo "ERROR: no OpenBLAS on this machine and none carried (see --prepare-deps in this script)."
    fi
  fi
  # CUTLASS/CuTe headers: the python3 package's, else the carried wheel's, unpacked where
  # cmake/FindCutlass.cmake looks (build-cuda-deps/cutlass/include).
  if ! python3 -c "import cutlass_library" 2>/dev/null && [[ ! -f "$deps_dir/cutlass/include/cute/tensor.hpp" ]]; then
    wheel="$(compgen -G "$deps_dir/wheels/nvidia_cutlass-*.whl" | head -1)"
    if [[ -n "$wheel" ]]; then
      echo "== unpacking the CUTLASS headers of $wheel"
      python3 - "$wheel" "$deps_dir/cutlass" <<'UNPACK'
import os, sys, zipfile
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = os.path.join(sys.argv[2], "include", name[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as out:
                out.write(wheel.read(name))
UNPACK
    else
      echo "WARNING: no CUTLASS headers and no carried wheel: the own Hopper kernels are left out (see --prepare-deps)"
    fi
  fi
  if ((${#prefix_path[@]})); then
    cmake_arguments+=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${prefix_path[*]}")")
  fi

  # The device keeps ignored build folders between calls, while carried folders are replaced:
  # configure afresh every run so that no cached path points into an old carry (objects stay).
  rm -f "$build_dir/CMakeCache.txt"
  echo "== cmake ${cmake_arguments[*]}"
  if [[ "$stages" == " python-gpu " ]]; then
    echo "== only the python-gpu stage: it builds the package itself, not this build"
  else
    cmake -S "$root" -B "$build_dir" "${cmake_arguments[@]}" &&
      echo "== build with $jobs jobs" &&
      timeout "$(budget_left)" cmake --build "$build_dir" -j "$jobs" ${SPATTN_BUILD_TARGETS:+--target $SPATTN_BUILD_TARGETS}
  fi
} >"$logs/build.log" 2>&1
build_status=$?
if [[ "$stages" == " python-gpu " ]]; then
  record build skipped "only python-gpu was asked for"
elif [[ $build_status -eq 0 && ( -n "${SPATTN_BUILD_TARGETS:-}" || -x "$build_dir/tests/gpu/spattn_gpu_tests" ) ]]; then
  built=1
  record build passed "in ${SECONDS}s with $jobs jobs"
elif [[ $build_status -eq 124 ]]; then
  record build failed "stopped by the ${budget_s}s budget: see build.log"
else
  record build failed "exit $build_status: see build.log ($(grep -m1 -E 'error:|CMake Error|ERROR:' "$logs/build.log" | cut -c1-150))"
fi
gpu_tests="$build_dir/tests/gpu/spattn_gpu_tests"

# ---- softmax-overlap -----------------------------------------------------------------------------
hopper_objects=("$build_dir"/src/kernels/hopper/CMakeFiles/spattn_hopper_kernels.dir/*.o)
# cuobjdump: on PATH, else beside nvcc
CUOBJDUMP="$(command -v cuobjdump || echo "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/cuobjdump")"
export CUOBJDUMP
if ! wants softmax-overlap; then
  :
elif ((!built)) || [[ ! -f "${hopper_objects[0]}" ]]; then
  record softmax-overlap skipped "no build of the own kernels"
elif [[ ! -x "$CUOBJDUMP" ]]; then
  record softmax-overlap skipped "no cuobjdump on PATH or beside nvcc"
elif python3 "$root/scripts/check-softmax-overlap.py" "${hopper_objects[@]}" >"$logs/softmax-overlap.log" 2>&1; then
  record softmax-overlap passed "$(grep -c '^ok' "$logs/softmax-overlap.log") kernels"
else
  record softmax-overlap failed "$(grep -c '^FAIL' "$logs/softmax-overlap.log") kernels without the overlap: see softmax-overlap.log"
fi

# ---- gpu-tests -----------------------------------------------------------------------------------------
if ! wants gpu-tests; then
  :
elif ((built)); then
  timeout "$(seconds_left)" "$gpu_tests" --gtest_color=no --gtest_filter="${SPATTN_GPU_TESTS_FILTER:-*}" \
    >"$logs/gpu-tests.log" 2>&1
  status=$?
  counts="$(gtest_counts "$logs/gpu-tests.log")"
  if [[ $status -ne 0 ]]; then
    record gpu-tests failed "exit $status; $counts"
  elif (($(skips_not_for_gpu_count "$logs/gpu-tests.log") > 0)); then
    # On a GPU machine a skip means the tests did not see the GPU: that is a failure here.
    record gpu-tests failed "$counts: tests skipped on a GPU machine (no CUDA device seen)"
  else
    record gpu-tests passed "$counts"
  fi
else
  record gpu-tests skipped "no build"
fi

# ---- conformance --------------------------------------------------------------------------------------
if ! wants conformance; then
  :
elif ((built)); then
  # The conformance suite's CUDA targets. Its skips are the cases a target refuses (fp32, own's
  # head dims); a target skipped as unavailable did not see the GPU: a failure here, as above.
  conformance="$build_dir/tests/conformance/spattn_conformance"
  if [[ ! -x "$conformance" ]]; then
    record conformance skipped "spattn_conformance not built"
  else
    timeout "$(seconds_left)" "$conformance" --gtest_color=no --gtest_filter='cuda_*' >"$logs/conformance.log" 2>&1
    status=$?
    counts="$(gtest_counts "$logs/conformance.log")"
    unavailable="$(grep -c ' unavailable: ' "$logs/conformance.log")"
    if [[ $status -ne 0 ]]; then
      record conformance failed "exit $status; $counts"
    elif ((unavailable > 0)); then
      record conformance failed "$counts: $unavailable rows of targets unavailable on a GPU machine (see conformance.log)"
    else
      record conformance passed "$counts (skipped: cases a target refuses)"
    fi
    status=0
    : >"$logs/conformance-perf.log"
    for target in cuda_own cuda_cudnn; do
      # shellcheck disable=SC2086  # the extra arguments are words
      timeout "$(seconds_left)" "$conformance" perf --target "$target" ${SPATTN_CONFORMANCE_PERF_ARGS:---scale 32} \
        >>"$logs/conformance-perf.log" 2>&1 || status=$?
    done
    timed="$(grep -E '^cuda_' "$logs/conformance-perf.log" | grep -cvE 'skipped:|failed:')"
    if [[ $status -eq 0 ]]; then record conformance-perf passed "$timed cases timed"
    else record conformance-perf failed "exit $status; $timed cases timed: see conformance-perf.log"; fi
  fi
else
  record conformance skipped "no build"
fi

# ---- memcheck, racecheck ------------------------------------------------------------------------------
# sanitize TOOL OPTIONS...: spattn_gpu_tests under compute-sanitizer --tool TOOL into TOOL.log
# (options that start with --gtest_ go to the tests, the others to compute-sanitizer).
sanitize() {
  local tool="$1"
  shift
  if ! wants "$tool"; then
    return
  elif ! command -v compute-sanitizer >/dev/null; then
    record "$tool" skipped "compute-sanitizer not on PATH"
  elif ((!built)); then
    record "$tool" skipped "no build"
  else
    local sanitizer_options=() test_options=(--gtest_color=no)
    for option in "$@"; do
      if [[ "$option" == --gtest_* ]]; then test_options+=("$option"); else sanitizer_options+=("$option"); fi
    done
    timeout "$(seconds_left)" compute-sanitizer --tool "$tool" "${sanitizer_options[@]}" --error-exitcode 1 \
      "$gpu_tests" "${test_options[@]}" >"$logs/$tool.log" 2>&1
    local status=$? errors counts
    errors="$(grep -oE '(ERROR|RACECHECK) SUMMARY: [0-9]* (error|hazard)' "$logs/$tool.log" | tail -1)"
    counts="$(gtest_counts "$logs/$tool.log")"
    if [[ $status -eq 0 ]]; then
      record "$tool" passed "${errors:-no summary}; $counts"
    else
      record "$tool" failed "exit $status; ${errors:-no summary}; $counts"
    fi
  fi
}
# API errors are not reported: the tests provoke some on purpose (a 1 EiB cudaMalloc).
# SPATTN_MEMCHECK_FILTER, a --gtest_filter, narrows it (e.g. Hopper* for the own kernels alone).
sanitize memcheck --leak-check full --report-api-errors no --gtest_filter="${SPATTN_MEMCHECK_FILTER:-*}"
# Shared-memory hazards between the threads of a block, in spattn's own kernels: cuDNN's are not
# ours to fix (it reports some in its fused attention) and take long under racecheck: its kernels
# are excluded, and so are its tests (SPATTN_RACECHECK_FILTER, a --gtest_filter, widens it).
sanitize racecheck --racecheck-report hazard --report-api-errors no --kernel-name-exclude kns=cudnn \
  --gtest_filter="${SPATTN_RACECHECK_FILTER:--Cudnn*}"
# Barriers (named barriers, mbarriers) used by the wrong threads or in divergent code: the own
# kernels are the ones with warp-specialized barriers.
# Its default table of tracked mbarriers is smaller than a persistent grid's (9 per CTA).
sanitize synccheck --report-api-errors no --num-cuda-barriers 16384 --kernel-name-exclude kns=cudnn \
  --gtest_filter="${SPATTN_SYNCCHECK_FILTER:-Hopper*}"

# ---- ctest ---------------------------------------------------------------------------------------------
if ! wants ctest; then
  :
elif ((built)); then
  left="$(seconds_left)"
  (cd "$build_dir" && timeout "$left" ctest -j "$jobs" --output-on-failure --timeout "$left" \
    ${SPATTN_CTEST_REGEX:+-R "$SPATTN_CTEST_REGEX"}) >"$logs/ctest.log" 2>&1
  status=$?
  # Every test's whole output (the figures the tests print: stall reports, peak workspaces).
  cp "$build_dir/Testing/Temporary/LastTest.log" "$logs/ctest-output.log" 2>/dev/null
  passed="$(grep -cE 'Test +#[0-9]+: .* Passed' "$logs/ctest.log")"
  skipped="$(grep -cE 'Test +#[0-9]+: .*Skipped' "$logs/ctest.log")"
  failed="$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)' "$logs/ctest.log")"
  counts="passed=$passed failed=$failed skipped=$skipped"
  if [[ $status -eq 124 ]]; then
    record ctest failed "stopped by the ${budget_s}s budget; so far $counts"
  elif [[ $status -ne 0 ]]; then
    record ctest failed "exit $status; $counts"
  else
    record ctest passed "$counts"
  fi
else
  record ctest skipped "no build"
fi

gpus="$(nvidia-smi --list-gpus 2>/dev/null | wc -l)"
device_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -d ',')"

# ---- sweep ---------------------------------------------------------------------------------------------
# Sets runs and failures: the runs a check-sweep.sh log lists and those that fail or ended in an error.
count_sweep_runs() {
  runs="$(grep -cE ' (pass|fail|error)$' "$1")"
  failures="$(grep -cE ' (fail|error)$' "$1")"
}
# Writes the sweep log $1 as its summary $2: one line per run ending in PASS, FAIL or ERROR, with its
# worst ratio of distributed to one-device error (committed as bench/results/sweep-MACHINE-DATE.txt).
write_sweep_summary() {
  {
    echo "# $device_name x$gpus, $(date -u +%F): scripts/check-sweep.sh --device cuda" \
      "${SPATTN_SWEEP_KERNEL:+--kernel $SPATTN_SWEEP_KERNEL} (bf16, head dim 64, forward and backward)"
    awk '/ (pass|fail)$/ { printf "%-10s ranks %-2s causal %-3s seq %-5s worst %-3s %-8s %s\n", $1, $2, $3, $4, $10, $11, toupper($12) }
         / error$/ { printf "%-10s ranks %-2s causal %-3s ended without its report ERROR\n", $1, $2, $3 }' "$1"
  } >"$2"
}

if ! wants sweep; then
  :
elif ((built)); then
  SPATTN_BIN="$build_dir/spattn" SPATTN_SWEEP_RANKS="${SPATTN_SWEEP_RANKS:-1 2 3 8}" SPATTN_SWEEP_JOBS="${SPATTN_SWEEP_JOBS:-4}" \
    timeout "$(seconds_left)" bash "$root/scripts/check-sweep.sh" --device cuda \
      ${SPATTN_SWEEP_KERNEL:+--kernel "$SPATTN_SWEEP_KERNEL"} >"$logs/sweep.log" 2>&1
  status=$?
  count_sweep_runs "$logs/sweep.log"
  write_sweep_summary "$logs/sweep.log" "$logs/sweep-summary.txt"
  if [[ $status -eq 0 && $failures -eq 0 ]]; then
    record sweep passed "$runs runs checked"
  else
    record sweep failed "exit $status; $failures of $runs runs failed the check: see sweep.log"
  fi
else
  record sweep skipped "no build"
fi

# ---- forward-sweep ------------------------------------------------------------------------------------
if ! wants forward-sweep; then
  :
elif ((built)); then
  for kernel in ${SPATTN_SWEEP_KERNELS:-own cudnn}; do
    SPATTN_BIN="$build_dir/spattn" SPATTN_SWEEP_RANKS="${SPATTN_SWEEP_RANKS:-1 2 3 8}" SPATTN_SWEEP_JOBS="${SPATTN_SWEEP_JOBS:-4}" \
      SPATTN_SWEEP_PASS=forward \
      timeout "$(seconds_left)" bash "$root/scripts/check-sweep.sh" --device cuda --kernel "$kernel" \
      >"$logs/forward-sweep-$kernel.log" 2>&1
    status=$?
    count_sweep_runs "$logs/forward-sweep-$kernel.log"
    if [[ $status -eq 0 && $failures -eq 0 ]]; then
      record forward-sweep passed "--kernel $kernel: $runs runs checked"
    else
      record forward-sweep failed "--kernel $kernel: exit $status; $failures of $runs runs failed: see forward-sweep-$kernel.log"
    fi
  done
else
  record forward-sweep skipped "no build"
fi

# ---- faults --------------------------------------------------------------------------------------------
# The reliability tests alone, at every GPU (one rank each, so NCCL runs too): a rank stalled at
# its first transfer for every strategy and transport, and the plans' device memory.
if ! wants faults; then
  :
elif ((built)); then
  CUDA_MODULE_LOADING=EAGER timeout "$(seconds_left)" mpirun --oversubscribe -np "$gpus" \
    "$build_dir/tests/gpu/spattn_gpu_distributed_tests" --gtest_color=no \
    --gtest_filter="${SPATTN_FAULTS_FILTER:-*StalledRankOnGpus*:*PlanMemoryOnGpus*}" >"$logs/faults.log" 2>&1
  status=$?
  counts="$(gtest_counts "$logs/faults.log")"
  # Then through the program over NCCL, as a user meets it: rank 1 killed or stalled for ever at
  # its first transfer; every other rank must print that it timed out, and the job must end.
  # Open MPI ends a job at once when a rank dies, so the kill runs under --enable-recovery.
  # One GPU has no rank 1 to fault (NCCL takes one rank per GPU): those runs would prove nothing.
  program_faults=0 program_faults_failed=0 program_report=""
  ((gpus >= 2)) || program_report=" none: one GPU has no second rank to fault"
  for fault in stall kill; do
    ((gpus >= 2)) || break
    for algorithm in ${SPATTN_PROGRAM_FAULTS:-zigzag ulysses hamilton}; do
      launcher=(--oversubscribe -np "$gpus" -x SPATTN_TIMEOUT=3 -x "SPATTN_FAULT=$fault:1:0")
      [[ $fault == kill ]] && launcher+=(--enable-recovery)
      echo "== spattn run over NCCL, SPATTN_FAULT=$fault:1:0, $algorithm" >>"$logs/faults.log"
      started=$SECONDS
      timeout 60 mpirun "${launcher[@]}" "$build_dir/spattn" run --device cuda --transport nccl \
        --algo "$algorithm" --seq 4096 --heads 8 --head-dim 128 --backward >>"$logs/faults.log" 2>&1
      elapsed=$((SECONDS - started))
      program_faults=$((program_faults + 1))
      program_report+=" $fault/$algorithm ${elapsed}s"
      if ! tail -n 40 "$logs/faults.log" | grep -q "rank 0 of $gpus timed out after 3 s"; then
        program_faults_failed=$((program_faults_failed + 1))
        program_report+="(not reported)"
      fi
    done
  done
  if [[ $status -eq 0 && $program_faults_failed -eq 0 ]]; then
    record faults passed "$counts at $gpus ranks; program faults reported:$program_report"
  else
    record faults failed "exit $status; $counts at $gpus ranks; program faults:$program_report: see faults.log"
  fi
else
  record faults skipped "no build"
fi

# ---- python-gpu ------------------------------------------------------------------------------------------
# The Python package built with CUDA (SPATTN_CUDA=ON pip install .) into this python3, then its
# GPU tests under torchrun at one GPU and at every GPU.
if wants python-gpu; then
  # torch brings its own cuDNN and NCCL and loads them first (spattn/__init__.py imports it
  # first), so the extension is built against those: headers of the version that runs.
  torch_nvidia="$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia"))' 2>/dev/null)"
  [[ -f "$torch_nvidia/cudnn/include/cudnn.h" ]] && export CUDNN_ROOT="$torch_nvidia/cudnn"
  [[ -f "$torch_nvidia/nccl/include/nccl.h" ]] && export NCCL_HOME="$torch_nvidia/nccl"
  rm -f "$root"/build-python/*/CMakeCache.txt  # found libraries are cached: look again
  # A carried OpenBLAS (see the build) is found through the environment.
  [[ -f "$deps_dir/openblas/lib/libopenblas.so.0" ]] && ! ldconfig -p | grep -q 'libopenblas\.so' &&
    export CMAKE_PREFIX_PATH="$deps_dir/openblas${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  install_status=0
  (cd "$root" && SPATTN_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL="$jobs" timeout "$(budget_left)" \
    python3 -m pip install --no-build-isolation --no-deps --root-user-action=ignore .) >"$logs/python-build.log" 2>&1 ||
    install_status=$?
  if [[ $install_status -eq 0 ]]; then
    status=0
    summaries=""
    export PYTHONFAULTHANDLER=1  # a crash in the extension still names the Python line
    for nproc in $(printf '%s\n' 1 "$gpus" | sort -un); do
      timeout "$(seconds_left)" torchrun --standalone --nproc-per-node "$nproc" -m pytest -q -rxs \
        "$root/tests/python_gpu" >"$logs/python-gpu-$nproc.log" 2>&1 || status=$?
      summaries+="$nproc GPU: $(grep -E '(passed|failed|error)' "$logs/python-gpu-$nproc.log" | tail -1); "
      # The Python layer's time per call beside the C++ plan's (bench/python_call_overhead.py).
      timeout "$(seconds_left)" torchrun --standalone --nproc-per-node "$nproc" \
        "$root/bench/python_call_overhead.py" --device cuda >>"$logs/python-overhead.log" 2>&1 || status=$?
    done
    if [[ $status -eq 0 && "$summaries" == *passed* ]]; then record python-gpu passed "$summaries"
    else record python-gpu failed "exit $status; $summaries see python-gpu-*.log"; fi
  elif [[ $install_status -eq 124 ]]; then
    record python-gpu failed "stopped by the ${budget_s}s budget inside pip install . (a call of its own fits)"
  else
    record python-gpu failed "pip install . with SPATTN_CUDA=ON failed: see python-build.log"
  fi
fi

# ---- bench ---------------------------------------------------------------------------------------------
if ! wants bench; then
  :
elif ((built)); then
  # A rank left waiting by another gives up after SPATTN_TIMEOUT (120 s here, not 600): the timeout
  # retires the communicator, the later strategies fail at once, and the stages after keep their time.
  clock_samples_start bench
  # shellcheck disable=SC2086  # the extra arguments are words
  timeout "$(seconds_left)" mpirun --oversubscribe -np "$gpus" -x SPATTN_TIMEOUT="${SPATTN_TIMEOUT:-120}" \
    "$build_dir/bench/spattn_gpu_bench" \
    --device-name "$device_name x$gpus" --csv "$logs/bench.csv" ${SPATTN_BENCH_ARGS:-} >"$logs/bench.log" 2>&1
  status=$?
  clock_samples_stop
  if [[ $status -eq 0 ]]; then record bench passed "spattn: $(grep -c '^spattn' "$logs/bench.csv") rows"
  else record bench failed "spattn_gpu_bench exit $status: see bench.log"; fi
else
  record bench skipped "no build"
fi
if wants torch-bench; then
  # One torchrun per '|'-separated group of TORCH_BENCH_ARGS (e.g. one per --kv-heads).
  IFS='|' read -ra torch_runs <<<"${TORCH_BENCH_ARGS:- }"
  status=0
  : >"$logs/torch.log"
  for torch_arguments in "${torch_runs[@]}"; do
    # shellcheck disable=SC2086  # the extra arguments are words
    timeout "$(seconds_left)" torchrun --standalone --nproc-per-node "$gpus" "$root/bench/torch_context_parallel.py" \
      --device-name "$device_name x$gpus" --csv "$logs/bench.csv" $torch_arguments >>"$logs/torch.log" 2>&1 ||
      status=$?
  done
  if [[ $status -eq 0 ]]; then record torch-bench passed "$(grep -c '^torch' "$logs/bench.csv") rows"
  else record torch-bench failed "torch_context_parallel.py exit $status: see torch.log"; fi
fi
# ---- timeline -----------------------------------------------------------------------------------------
# Each strategy of SPATTN_TIMELINE_ALGOS at one rank per GPU with `spattn run --timeline`: every
# rank's compute and exposed transfer time per step (timeline-ALGO.{csv,md,png}).
if ! wants timeline; then
  :
elif ((built)); then
  status=0
  for algo in ${SPATTN_TIMELINE_ALGOS:-zigzag hamilton ulysses}; do
    # shellcheck disable=SC2086  # the extra arguments are words
    timeout "$(seconds_left)" mpirun --oversubscribe -np "$gpus" "$build_dir/spattn" run --device cuda --algo "$algo" \
      ${SPATTN_TIMELINE_ARGS:---seq $((8192 * gpus)) --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --causal --backward --kernel own --warmup 2 --iters 3} \
      --timeline "$logs/timeline-$algo.csv" >>"$logs/timeline.log" 2>&1 || status=$?
    python3 "$root/bench/plot_timeline.py" "$logs/timeline-$algo.csv" --title "$algo, $device_name x$gpus" \
      --out "$logs/timeline-$algo.png" --markdown "$logs/timeline-$algo.md" >>"$logs/timeline.log" 2>&1 || status=$?
  done
  if [[ $status -eq 0 ]]; then record timeline passed "${SPATTN_TIMELINE_ALGOS:-zigzag hamilton ulysses}"
  else record timeline failed "exit $status: see timeline.log"; fi
else
  record timeline skipped "no build"
fi
# ---- kernel-bench -------------------------------------------------------------------------------------
if ! wants kernel-bench; then
  :
elif ((built)); then
  : >"$logs/kernel-bench.csv"
  sustained=()
  if [[ -n "${SPATTN_KERNEL_SUSTAIN_S:-}" ]]; then
    sustained=(--sustain "$SPATTN_KERNEL_SUSTAIN_S" --windows "$logs/kernel-windows.csv")
  fi
  clock_samples_start kernel-bench
  # shellcheck disable=SC2086  # the extra arguments are words
  timeout "$(seconds_left)" "$build_dir/bench/spattn_kernel_bench" --csv "$logs/kernel-bench.csv" \
    "${sustained[@]}" ${SPATTN_KERNEL_BENCH_ARGS:-} >"$logs/kernel-bench.log" 2>&1
  status=$?
  if ((${#sustained[@]} == 0)); then
    # shellcheck disable=SC2086
    timeout "$(seconds_left)" python3 "$root/bench/kernel_sdpa.py" --csv "$logs/kernel-bench.csv" \
      ${SPATTN_KERNEL_BENCH_ARGS:-} >>"$logs/kernel-bench.log" 2>&1 || status=$?
  fi
  clock_samples_stop
  if ((${#sustained[@]} > 0)); then
    python3 "$root/bench/power_by_window.py" "$logs/kernel-windows.csv" "$logs/clocks-kernel-bench.csv" \
      --markdown "$logs/kernel-power.md" >>"$logs/kernel-bench.log" 2>&1 || status=$?
  fi
  python3 "$root/bench/plot_kernel_results.py" "$logs/kernel-bench.csv" --out "$logs/kernel-bench.png" \
    --markdown "$logs/kernel-bench.md" >>"$logs/kernel-bench.log" 2>&1 || status=$?
  rows="$(($(wc -l <"$logs/kernel-bench.csv") - 1))"
  if [[ $status -eq 0 ]]; then record kernel-bench passed "$rows rows"
  else record kernel-bench failed "exit $status; $rows rows: see kernel-bench.log"; fi
else
  record kernel-bench skipped "no build"
fi
# ---- kernel-profile -----------------------------------------------------------------------------------
# Nsight Compute's counters for the kernels of one spattn_kernel_bench case (own, then cuDNN): where
# the time goes (tensor pipe busy, issue slots, warp stalls, clock). --clock-control none leaves the
# clocks as they run (METHOD.md).
if ! wants kernel-profile; then
  :
elif ((built)) && command -v ncu >/dev/null; then
  status=0
  : >"$logs/kernel-profile.txt"
  # The input fills, the check's calls and one timed call of each kernel: the first 16 launches (32
  # for the backward, which first runs cuDNN's forward for out and lse and the delta kernel).
  profile_pass="${SPATTN_PROFILE_PASS:-forward}"
  profile_launches=16
  [[ $profile_pass == backward ]] && profile_launches=32
  # shellcheck disable=SC2086  # the extra arguments are words
  timeout "$(seconds_left)" ncu --clock-control none --launch-count "$profile_launches" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    "$build_dir/bench/spattn_kernel_bench" --passes "$profile_pass" --kernels own,cudnn --warmup 1 --iters 1 --repeats 1 \
    ${SPATTN_PROFILE_ARGS:---seqs 8192 --head-dims 128 --causal yes} >>"$logs/kernel-profile.txt" 2>&1 || status=$?
  # Where the own kernel's warps wait, instruction by instruction: its SASS with the stall
  # reasons sampled at each instruction (own-kernel-source.csv.gz).
  timeout "$(seconds_left)" ncu --clock-control none --kernel-name "regex:${profile_pass}_kernel" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --import-source no -f -o "$build_dir/own-kernel" \
    "$build_dir/bench/spattn_kernel_bench" --passes "$profile_pass" --kernels own --warmup 1 --iters 1 --repeats 1 \
    ${SPATTN_PROFILE_ARGS:---seqs 8192 --head-dims 128 --causal yes} >>"$logs/kernel-profile.txt" 2>&1 || status=$?
  ncu --import "$build_dir/own-kernel.ncu-rep" --page source --csv --print-source sass \
    >"$logs/own-kernel-source.csv" 2>>"$logs/kernel-profile.txt" || status=$?
  gzip -f "$logs/own-kernel-source.csv"
  if [[ $status -eq 0 ]]; then record kernel-profile passed "$(grep -c 'Duration' "$logs/kernel-profile.txt") kernels"
  else record kernel-profile failed "exit $status: see kernel-profile.txt"; fi
else
  record kernel-profile skipped "no build or no ncu"
fi
# ---- kernel-ab, bench-ab: builds of SPATTN_AB_PATCHES taking turns ----------------------------------
# Stage STAGE: the builds of BINARY (TARGET's, relative to the build) kept under build_dir/STAGE,
# each beside its library: the tree as built (base), then the tree with each patch of
# SPATTN_AB_PATCHES applied, TARGET rebuilt and the patch reverted (a patch that does not apply or
# build is left out; STAGE.log says why), and the objects built with patches deleted. Every build
# runs SPATTN_AB_ROUNDS times (default 3), the builds taking turns: `RUN VARIANT DIRECTORY` runs
# the build in DIRECTORY/VARIANT into DIRECTORY/VARIANT.csv. COMPARE (a bench/ script) tables the CSVs
# into STAGE.md; they go into STAGE-csv.tar.gz.
ab_stage() {
  local stage=$1 target=$2 binary=$3 compare=$4 run=$5
  local directory="$build_dir/$stage" log="$logs/$stage.log" patch environment name round variant status=0 exit_status
  local variants csvs=()
  rm -rf "$directory"
  # LD_LIBRARY_PATH picks each build's library (it comes before the binaries' RUNPATH).
  keep_build() { mkdir -p "$directory/$1" && cp "$build_dir/$binary" "$build_dir"/libspattn.so* "$directory/$1/"; }
  keep_build base
  variants=(base)
  for patch in ${SPATTN_AB_PATCHES:-}; do
    name="$(basename "$patch" .patch)"
    echo "== variant $name: $patch" >>"$log"
    if ! patch --dry-run -p1 -d "$root" <"$patch" >>"$log" 2>&1; then
      echo "== $patch does not apply: left out" >>"$log"
      continue
    fi
    patch -p1 -d "$root" <"$patch" >>"$log" 2>&1
    if timeout "$(budget_left)" cmake --build "$build_dir" -j "$jobs" --target "$target" >>"$log" 2>&1; then
      keep_build "$name" && variants+=("$name")
    else
      echo "== variant $name does not build: left out" >>"$log"
    fi
    patch -R -p1 -d "$root" <"$patch" >>"$log" 2>&1
  done
  # Objects built with a patch go: the device tool may copy the tree again before the next call,
  # the reverted sources with their older times, and make would keep the patch's objects (a host
  # object of a patch that changed the query tile stayed in the next call's base, whose
  # deterministic backward then hung, 2026-12-06). The next build makes them again from the tree.
  find "$build_dir" -name '*.o' -newer "$directory/base/$(basename "$binary")" -delete
  # The base build again under each environment of SPATTN_AB_ENVS; DIRECTORY/VARIANT.env holds its
  # assignments, one a line, for RUN to set.
  for environment in ${SPATTN_AB_ENVS:-}; do
    name="$(tr '=,' '-_' <<<"$environment")"
    echo "== variant $name: the base build with $environment" >>"$log"
    cp -r "$directory/base" "$directory/$name" && tr ',' '\n' <<<"$environment" >"$directory/$name.env" &&
      variants+=("$name")
  done
  clock_samples_start "$stage"
  for round in $(seq "${SPATTN_AB_ROUNDS:-3}"); do
    for variant in "${variants[@]}"; do
      echo "== round $round: $variant ($(date +%T))" >>"$log"
      exit_status=0
      "$run" "$variant" "$directory" >>"$log" 2>&1 || exit_status=$?
      ((exit_status == 0)) || status=$exit_status
      # 124 is timeout's: the run reached its limit (seconds_left), as one whose kernel never ends does
      if ((exit_status == 124)); then echo "== round $round: $variant stopped at its time limit" >>"$log"
      elif ((exit_status != 0)); then echo "== round $round: $variant exited $exit_status" >>"$log"; fi
    done
  done
  clock_samples_stop
  for variant in "${variants[@]}"; do csvs+=("$directory/$variant.csv"); done
  python3 "$root/bench/$compare" "${csvs[@]}" --markdown "$logs/$stage.md" >>"$log" 2>&1 || status=$?
  tar -czf "$logs/$stage-csv.tar.gz" -C "$directory" "${variants[@]/%/.csv}"
  if [[ $status -eq 0 ]]; then record "$stage" passed "${#variants[@]} builds: ${variants[*]}"
  else record "$stage" failed "exit $status: see $stage.log"; fi
}

# The assignments of VARIANT's environment in DIRECTORY (see ab_stage), one a line; none for a build.
variant_environment() {
  [[ -f "$2/$1.env" ]] && cat "$2/$1.env"
  return 0
}

# The kernel bench of build VARIANT in DIRECTORY, on one GPU.
run_kernel_bench_variant() {
  local assignments
  mapfile -t assignments < <(variant_environment "$1" "$2")
  # shellcheck disable=SC2086  # the extra arguments are words
  env "${assignments[@]}" LD_LIBRARY_PATH="$2/$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$(seconds_left)" \
    "$2/$1/spattn_kernel_bench" --kernels own,cudnn --csv "$2/$1.csv" ${SPATTN_KERNEL_BENCH_ARGS:-}
}

# The distributed bench of build VARIANT in DIRECTORY, one rank per GPU.
run_gpu_bench_variant() {
  local assignment exports=()
  while IFS= read -r assignment; do exports+=(-x "$assignment"); done < <(variant_environment "$1" "$2")
  # shellcheck disable=SC2086  # the extra arguments are words
  timeout "$(seconds_left)" mpirun --oversubscribe -np "$gpus" -x SPATTN_TIMEOUT="${SPATTN_TIMEOUT:-120}" \
    -x LD_LIBRARY_PATH="$2/$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${exports[@]}" "$2/$1/spattn_gpu_bench" \
    --device-name "$device_name x$gpus" --csv "$2/$1.csv" ${SPATTN_BENCH_ARGS:-}
}

if ! wants kernel-ab; then
  :
elif ((built)); then
  ab_stage kernel-ab spattn_kernel_bench bench/spattn_kernel_bench compare_kernel_variants.py run_kernel_bench_variant
else
  record kernel-ab skipped "no build"
fi
if ! wants bench-ab; then
  :
elif ((built)); then
  ab_stage bench-ab spattn_gpu_bench bench/spattn_gpu_bench compare_bench_variants.py run_gpu_bench_variant
else
  record bench-ab skipped "no build"
fi
if [[ -s "$logs/bench.csv" ]]; then
  python3 "$root/bench/plot_results.py" "$logs/bench.csv" --out "$logs/bench.png" \
    --markdown "$logs/bench.md" >"$logs/plot.log" 2>&1 || echo "plot: see plot.log (matplotlib may be missing)"
fi

# The device tool brings back only 8 files from $OUT: past that, everything but the summary and the
# markdown tables goes into one archive.
if (($(find "$logs" -maxdepth 1 -type f | wc -l) > 8)); then
  (cd "$logs" && find . -maxdepth 1 -type f ! -name summary.txt ! -name '*.md' ! -name logs.tar.gz -printf '%P\n' \
    | tar -czf logs.tar.gz -T - --remove-files)
  echo "logs packed into logs.tar.gz"
fi
echo "logs in $logs"
exit "$any_failed"
