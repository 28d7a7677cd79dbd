// Every strategy on GPUs at the rank count of this run, forward and backward, with the automatic
// block kernels (the own Hopper kernels on sm_90, cuDNN elsewhere), over both device transports: NCCL (one GPU per
// rank) and MPI staged through the host (any number of ranks per GPU, so that 3 or 8 ranks run on one or two GPUs).
// Each is held to the 2x criterion against the fp64 reference, next to one GPU running the whole problem.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "shared_device_communicators.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

using GpuCase = std::tuple<Algorithm, int /*mask index*/, DType, Transport>;

class GpuStrategyAccuracy : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuStrategyAccuracy, MatchesReferenceForwardAndBackward) {
  const auto [algorithm, mask_index, dtype, transport] = GetParam();
  AlgorithmSetup setup;
  std::string why_skipped;
  Communicator* communicator = gpu_case_communicator(algorithm, transport, setup, why_skipped);
  if (communicator == nullptr) GTEST_SKIP() << why_skipped;
  const int ranks = world().size();
  const std::string refusal = mask_unsupported(algorithm, kMasks[mask_index].options);  // stripe: no windows
  if (!refusal.empty()) GTEST_SKIP() << refusal;
  // Heads divisible by every rank count for Ulysses, two query heads per kv head (GQA); an odd
  // multiple of the length unit so that no chunk is a multiple of a kernel tile.
  const int64_t multiple = setup.length_unit >= 26 ? 3 : 13;
  const AttentionShape shape{1, setup.length_unit * multiple, 2 * ranks, ranks, 64, dtype};
  const uint64_t seed = 2000 + static_cast<uint64_t>(mask_index) * 10 + static_cast<uint64_t>(dtype);
  expect_accurate_on(*communicator, algorithm,
                     random_problem(shape, kMasks[mask_index].options, seed, /*backward=*/true), setup.options);
}

std::string case_name(const ::testing::TestParamInfo<GpuCase>& info) {
  const auto [algorithm, mask_index, dtype, transport] = info.param;
  return algorithm_name(algorithm) + "_" + kMasks[mask_index].name + "_" + dtype_name(dtype) + "_" +
         transport_case_name(transport);
}

// bf16 under every mask; fp16 under the causal mask (the kernels' dtype paths are shared).
INSTANTIATE_TEST_SUITE_P(Bf16, GpuStrategyAccuracy,
                         ::testing::Combine(::testing::ValuesIn(all_algorithms()), ::testing::Range(0, 4),
                                            ::testing::Values(DType::bf16), ::testing::ValuesIn(kDeviceTransports)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Fp16, GpuStrategyAccuracy,
                         ::testing::Combine(::testing::ValuesIn(all_algorithms()), ::testing::Values(1),
                                            ::testing::Values(DType::f16), ::testing::ValuesIn(kDeviceTransports)),
                         case_name);

}  // namespace
}  // namespace spattn
