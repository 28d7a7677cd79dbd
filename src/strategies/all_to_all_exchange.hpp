#pragma once
// The packer of the Ulysses strategies' all-to-alls: one exchange carries several tensors at once
// (q, k and v; or out and lse; ...), each peer's block holding one part per tensor.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/block_kernels.hpp"
#include "spattn/communicator.hpp"
#include "spattn/tensor.hpp"
#include "strategies/device_buffer.hpp"

namespace spattn {

// The send and receive buffers of one all-to-all that carries several tensors at once. The block
// of every peer has the same size (an all-to-all needs that) and holds one part per tensor.
class AllToAllExchange {
 public:
  // Every part starts at a multiple of this, so an fp32 part after a bf16 one stays aligned
  // (and device loads stay vectorized).
  static constexpr std::size_t kPartAlignment = 256;

  // Appends a contiguous part of shape `dims` and `dtype` to every block; parts are numbered in
  // the order they are added.
  void add_part(DType dtype, std::initializer_list<int64_t> dims) {
    parts.push_back(TensorView::contiguous(nullptr, dtype, dims));
    part_offsets.push_back(block_bytes);
    const std::size_t end = block_bytes + static_cast<std::size_t>(parts.back().numel()) * dtype_size(dtype);
    block_bytes = (end + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  }

  // At the first call only: the buffers then serve every later call.
  void allocate(BlockKernels& kernels, int ranks) {
    if (send_buffer.data()) return;
    device = kernels.device();
    send_buffer = DeviceBuffer(kernels, block_bytes * static_cast<std::size_t>(ranks));
    receive_buffer = DeviceBuffer(kernels, block_bytes * static_cast<std::size_t>(ranks));
    // Padding and unused kv-head room travel too: zero them once so no uninitialized byte moves.
    kernels.fill(TensorView::contiguous(send_buffer.data(), DType::f32,
                                        {static_cast<int64_t>(block_bytes / sizeof(float)) * ranks}, device),
                 0.0f);
  }

  TensorView to_send(int peer, int part) const { return view(send_buffer, peer, part); }
  TensorView received(int peer, int part) const { return view(receive_buffer, peer, part); }

  std::unique_ptr<PendingTransfer> start(Communicator& comm) const {
    return comm.start_all_to_all(send_buffer.data(), receive_buffer.data(), block_bytes);
  }

  // Bytes of one peer's block (padding included: it travels too).
  std::size_t bytes_per_peer() const { return block_bytes; }

 private:
  TensorView view(const DeviceBuffer& buffer, int peer, int part) const {
    TensorView tensor = parts[static_cast<std::size_t>(part)];
    tensor.device = device;
    tensor.data = static_cast<char*>(buffer.data()) + static_cast<std::size_t>(peer) * block_bytes +
                  part_offsets[static_cast<std::size_t>(part)];
    return tensor;
  }

  std::vector<TensorView> parts;  // shapes and dtypes, no data
  std::vector<std::size_t> part_offsets;
  std::size_t block_bytes = 0;
  Device device{};
  DeviceBuffer send_buffer;     // block p goes to rank p
  DeviceBuffer receive_buffer;  // block j comes from rank j
};

}  // namespace spattn
