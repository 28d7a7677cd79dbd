// What each KernelChoice may run on, without a GPU: the CPU's one set of kernels takes only
// automatic, CUDA's take no fp32, the kernels refuse the rest as block_kernels_unsupported words
// it, and plans validate and agree on the choice like any other option.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"
#include "strategies/call_validation.hpp"

namespace spattn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(KernelChoiceRules, TheCpuTakesOnlyAutomatic) {
  EXPECT_EQ(block_kernels_unsupported(Device::cpu(), KernelChoice::automatic, DType::f32, 64), "");
  EXPECT_EQ(block_kernels_unsupported(Device::cpu(), KernelChoice::own, DType::bf16, 128),
            "kernel own names CUDA kernels (spattn's own Hopper kernels) and cannot run on cpu; allowed there: auto");
  EXPECT_EQ(block_kernels_unsupported(Device::cpu(), KernelChoice::cudnn, DType::f16, 64),
            "kernel cudnn names CUDA kernels (cuDNN's fused attention) and cannot run on cpu; allowed there: auto");
}

TEST(KernelChoiceRules, CudaPlansRefuseFp32BeforeAnyTransfer) {
  // Every kernel choice: a CUDA plan of fp32 inputs is refused by its validation (which runs before
  // the ranks agree and transfer), not by the first block kernel after step 0's transfer started.
  const Device gpu{DeviceKind::cuda, 0};
  // The same rule says whether this build has CUDA kernels at all: bf16 runs wherever they exist.
  const bool cuda_built_in = block_kernels_unsupported(gpu, KernelChoice::automatic, DType::bf16, 64).empty();
  const AttentionShape shape{1, 64, 4, 2, 64, DType::f32};
  for (KernelChoice kernel : {KernelChoice::automatic, KernelChoice::own, KernelChoice::cudnn}) {
    SCOPED_TRACE(kernel_choice_name(kernel));
    AttentionOptions options;
    options.kernel = kernel;
    const std::string why = shape_and_options_error(shape, options, gpu);
    if (cuda_built_in) {
      EXPECT_THAT(why, AllOf(HasSubstr("bf16 or fp16"), HasSubstr("not fp32"), HasSubstr("cuda:0")));
    } else {
      EXPECT_THAT(why, HasSubstr("no kernels for device cuda:0"));
    }
    EXPECT_EQ(block_kernels_unsupported(gpu, kernel, DType::f32, 64).empty(), false);
  }
}

TEST(KernelChoiceRules, Fp32IsRefusedOnCudaAloneWithoutAskingAnyDevice) {
  EXPECT_THAT(input_dtype_unsupported(DeviceKind::cuda, DType::f32),
              AllOf(HasSubstr("bf16 or fp16"), HasSubstr("not fp32"), HasSubstr("fp32 path")));
  EXPECT_EQ(input_dtype_unsupported(DeviceKind::cuda, DType::bf16), "");
  EXPECT_EQ(input_dtype_unsupported(DeviceKind::cuda, DType::f16), "");
  EXPECT_EQ(input_dtype_unsupported(DeviceKind::cpu, DType::f32), "");
}

TEST(KernelChoiceRules, MakeBlockKernelsRefusesWhatTheRuleRefuses) {
  EXPECT_EQ(make_block_kernels(Device::cpu(), {DType::f32, 64}, KernelChoice::automatic)->device(), Device::cpu());
  for (KernelChoice kernel : {KernelChoice::own, KernelChoice::cudnn}) {
    SCOPED_TRACE(kernel_choice_name(kernel));
    try {
      make_block_kernels(Device::cpu(), {DType::f32, 64}, kernel);
      FAIL() << "accepted";
    } catch (const Error& error) {
      EXPECT_EQ(std::string(error.what()),
                "spattn: " + block_kernels_unsupported(Device::cpu(), kernel, DType::f32, 64));
    }
  }
}

TEST(KernelChoiceRules, PlanValidationNamesTheChoiceAndWhatIsAllowed) {
  const AttentionShape shape{1, 64, 4, 2, 32, DType::f32};
  AttentionOptions options;
  EXPECT_EQ(shape_and_options_error(shape, options, Device::cpu()), "");
  options.kernel = KernelChoice::own;
  EXPECT_THAT(shape_and_options_error(shape, options, Device::cpu()),
              AllOf(HasSubstr("kernel own"), HasSubstr("cannot run on cpu"), HasSubstr("allowed there: auto")));
}

// The kernel field of a call's signature, as an error shows it.
std::string agreed_kernel(const AttentionShape& shape, const AttentionOptions& options) {
  for (const CallField& field : call_signature(Algorithm::ring, shape, options))
    if (std::string(field.name) == "kernel") return field.show(field.value);
  return "none";
}

TEST(KernelChoiceRules, RanksOfDifferentChoicesDisagree) {
  const AttentionShape shape{1, 64, 4, 2, 32, DType::bf16};
  AttentionOptions automatic, own, cudnn;
  own.kernel = KernelChoice::own;
  cudnn.kernel = KernelChoice::cudnn;
  EXPECT_EQ(agreed_kernel(shape, automatic), "auto");
  EXPECT_EQ(agreed_kernel(shape, own), "own");
  EXPECT_EQ(agreed_kernel(shape, cudnn), "cudnn");
}

}  // namespace
}  // namespace spattn
