#pragma once
// Where spattn's own allocations report themselves, for memory_statistics(): every allocator of
// workspace (the block kernels', cuDNN's) records what it allocates and releases.

#include <cstddef>

#include "spattn/device.hpp"

namespace spattn {

void record_allocation(const Device& device, const void* pointer, std::size_t bytes);

/// Releases what record_allocation recorded at `pointer` (nothing for a pointer it never saw).
void record_release(const Device& device, const void* pointer);

}  // namespace spattn
