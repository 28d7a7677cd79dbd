#pragma once
// The byte of shared memory that an element of a CuTe swizzled layout lands on, for the CPU tests
// of the own kernels' shared-memory layouts: CuTe applies the swizzle to the pointer's bytes, after
// the layout's offset, so the offset alone does not say where an element is.

#include <cute/tensor.hpp>

namespace spattn::cuda::hopper {

/// The byte, from the (1024-byte aligned) start of its storage, of the `Element` at `coordinates`
/// of the swizzled layout `smem`.
template <class Element, class Smem, class... Coordinates>
int swizzled_byte(const Smem& smem, Coordinates... coordinates) {
  return static_cast<int>(smem.layout_a()(static_cast<int>(smem.layout_b()(coordinates...)) * int{sizeof(Element)}));
}

}  // namespace spattn::cuda::hopper
