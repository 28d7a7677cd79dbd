#include "error_bounds.hpp"

namespace spattn::test {
namespace {

/// The unit roundoff of a dtype: the largest relative error of rounding a value to it.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f32: return 0x1p-24;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
  }
  return 1.0;
}

}  // namespace

// An output may be off by the error of the arithmetic that computes it, plus one rounding to the
// dtype it is stored in (final_out). The arithmetic's errors are those the kernel tests before
// this suite hold the kernels to:
//  - the CPU kernels compute in fp32 whatever the input dtype (inputs of every dtype are exact in
//    fp32): 1e-5 for out, lse and the gradients (tests/cpp/kernels/forward_test.cpp, backward_test.cpp);
//  - cuDNN and the own Hopper forward round the probabilities to the input dtype before P V, and
//    cuDNN writes each piece's out and gradients in it: 2e-2 for bf16 and 5e-3 for fp16, about 5
//    and 10 units of that rounding; lse, kept in fp32, 1e-3 (tests/gpu/cudnn_attention_test.cpp,
//    hopper_forward_test.cpp);
//  - merge and softmax_delta are a few fp32 operations per element on every device: 1e-5;
//  - copy, fill and add round each element once, to nearest even: exact on every device.
double allowed_error(const KernelTarget& target, DType input_dtype, OutputKind kind, DType stored_dtype) {
  double arithmetic = 1e-5;
  switch (kind) {
    case OutputKind::exact: return 0.0;
    case OutputKind::fp32_arithmetic: break;
    case OutputKind::lse:
      if (target.device.kind == DeviceKind::cuda) arithmetic = 1e-3;
      break;
    case OutputKind::attention:
      if (target.device.kind == DeviceKind::cuda) arithmetic = input_dtype == DType::bf16 ? 2e-2 : 5e-3;
      break;
  }
  return arithmetic + unit_roundoff(stored_dtype);
}

}  // namespace spattn::test
