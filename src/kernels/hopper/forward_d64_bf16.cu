// The own forward for head dim 64, bf16 inputs (one instantiation per file: see CMakeLists.txt).
#include "kernels/hopper/forward_kernel.cuh"

namespace spattn::cuda::hopper {
template void launch_forward<64, DType::bf16>(const ForwardProblem&, int, cudaStream_t);
}  // namespace spattn::cuda::hopper
