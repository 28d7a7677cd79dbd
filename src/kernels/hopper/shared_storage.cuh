#pragma once
// Where a kernel's SharedStorage lives in dynamic shared memory.

#include <cstdint>

namespace spattn::cuda::hopper {

/// The kernel's `Storage` at the first 1024-byte boundary of its dynamic shared memory (the
/// 128-byte swizzled tiles need that alignment; the dynamic base is promised only 16 bytes, so
/// the launch asks for sizeof(Storage) + 1024). The address is the __shared__ array plus an
/// offset, never a round trip through an integer: the compiler then knows that every access
/// through it is to shared memory and emits LDS/STS with 32-bit addresses. Through an integer
/// cast it emits generic loads and stores with 64-bit addresses (the backward's reads of lse and
/// delta were generic loads, their latency its largest stall; bench/kernel-notes.md, b2a).
/// The forward still takes its storage through the integer cast: with this, ptxas (CUDA 13.0)
/// spills more of its registers (76 -> 100 bytes at D 128), to be weighed on a GPU first.
template <class Storage>
__device__ __forceinline__ Storage& aligned_shared_storage() {
  extern __shared__ char shared_bytes[];
  const uint32_t misalignment = static_cast<uint32_t>(__cvta_generic_to_shared(shared_bytes)) % 1024;
  return *reinterpret_cast<Storage*>(shared_bytes + (1024 - misalignment) % 1024);
}

}  // namespace spattn::cuda::hopper
