// The own backward for head dim 128, bf16 inputs (one instantiation per file: see CMakeLists.txt).
#include "kernels/hopper/backward_kernel.cuh"

namespace spattn::cuda::hopper {
template void launch_backward<128, DType::bf16>(const BackwardProblem&, cudaStream_t);
}  // namespace spattn::cuda::hopper
