#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the .npy reader and the command line parser, with
# AddressSanitizer and UndefinedBehaviorSanitizer) with clang into build-fuzz/, and runs each for
# SPATTN_FUZZ_SECONDS seconds (default 60) from its seed corpus (tests/fuzz/corpus/<target>).
# Inputs that find new coverage go to build-fuzz/corpus/<target> (kept between runs, so later
# runs start from them); a crash, a leak, undefined behaviour, an input slower than 10 s or an
# allocation over 512 MB stops the run, fails the script and leaves the input in
# build-fuzz/artifacts/. Replay one with: build-fuzz/tests/fuzz/<target> <input file>.
# Installs what is missing (clang, libFuzzer's runtime) on Debian or Ubuntu as root.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
seconds="${SPATTN_FUZZ_SECONDS:-60}"
bash "$root/scripts/install-dependencies.sh" --no-python

# Only the library (uninstrumented; the command line fuzzer lists its names) and the two targets.
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  -DSPATTN_CUDA=OFF -DSPATTN_BUILD_TESTS=OFF -DSPATTN_BUILD_APPS=OFF -DSPATTN_BUILD_BENCH=OFF -DSPATTN_NATIVE=OFF \
  -DSPATTN_FUZZERS=ON
cmake --build "$build" -j "$(nproc)" --target npy_file_fuzzer cli_options_fuzzer

mkdir -p "$build/artifacts"
for target in npy_file_fuzzer cli_options_fuzzer; do
  corpus="$build/corpus/${target%_fuzzer}"
  mkdir -p "$corpus"
  echo "fuzzing ${target} for ${seconds} s"
  "$build/tests/fuzz/$target" "$corpus" "$root/tests/fuzz/corpus/${target%_fuzzer}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$target-"
done
