// The own forward for head dim 128, fp16 inputs (one instantiation per file: see CMakeLists.txt).
#include "kernels/hopper/forward_kernel.cuh"

namespace spattn::cuda::hopper {
template void launch_forward<128, DType::f16>(const ForwardProblem&, int, cudaStream_t);
}  // namespace spattn::cuda::hopper
