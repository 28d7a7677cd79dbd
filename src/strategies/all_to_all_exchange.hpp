#pragma once
// The packer of the Ulysses strategies' all-to-alls: one exchange carries several tensors at once
// (q, k and v; or out and lse; ...), each peer's piece of each tensor one part of that peer's block.
// A part whose pieces are the sequence chunks of one of the strategy's own tensors (batch 1: the
// chunk of every peer is contiguous there) can travel straight from that tensor or land straight
// in it, so that no copy packs or unpacks it.

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

// The send and receive buffers of one all-to-all that carries several tensors at once. Every
// peer's block has the same parts, each of one shape, in the same places. This rank's own piece
// of a part never travels: to_send(rank, part) and received(rank, part) are the same memory, so
// that what packing writes there is what unpacking reads.
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
    placed.emplace_back();
    const std::size_t end = block_bytes + static_cast<std::size_t>(parts.back().numel()) * dtype_size(dtype);
    block_bytes = (end + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  }

  // Where a part's pieces can live outside the buffers: going out of a tensor, or landing in one.
  enum class Side { send, receive };

  // After allocate: `part`'s pieces go out of `gathered` (chunk p to peer p) or land in it (chunk
  // j from peer j) instead of the buffers, where its sequence chunks (dim 1) can hold them: one
  // part long each, contiguous (batch 1), of the part's dtype and shape. Elsewhere the part stays
  // in the buffers.
  void place(int part, const TensorView& gathered, Side side) {
    const TensorView& shape = parts[static_cast<std::size_t>(part)];
    if (gathered.dtype != shape.dtype || gathered.ndim != shape.ndim || gathered.size(1) != shape.size(1) * ranks)
      return;
    for (int dim = 0; dim < shape.ndim; ++dim)
      if (dim != 1 && gathered.size(dim) != shape.size(dim)) return;
    if (gathered.slice(1, 0, shape.size(1)).is_contiguous()) placed[static_cast<std::size_t>(part)] = {gathered, side};
  }

  // At the first call only: the buffers then serve every later call, over `comm`.
  void allocate(BlockKernels& kernels, const Communicator& comm) {
    if (send_buffer.data()) return;
    device = kernels.device();
    own_rank = comm.rank();
    ranks = comm.size();
    send_buffer = DeviceBuffer(kernels, block_bytes * static_cast<std::size_t>(ranks));
    receive_buffer = DeviceBuffer(kernels, block_bytes * static_cast<std::size_t>(ranks));
    // Unused kv-head room travels too: zero it once so no uninitialized byte moves.
    kernels.fill(TensorView::contiguous(send_buffer.data(), DType::f32,
                                        {static_cast<int64_t>(block_bytes / sizeof(float)) * ranks}, device),
                 0.0f);
  }

  TensorView to_send(int peer, int part) const { return piece(peer, part, Side::send, send_buffer); }
  TensorView received(int peer, int part) const {
    return peer == own_rank ? to_send(peer, part) : piece(peer, part, Side::receive, receive_buffer);
  }

  // Sends this rank's pieces to every peer and receives theirs, one message per part (the same on
  // every rank, wherever each rank keeps the part); the own piece stays.
  std::unique_ptr<PendingTransfer> start(Communicator& comm) {
    batch.sends.clear();
    batch.receives.clear();
    for (int peer = 0; peer < comm.size(); ++peer) {
      if (peer == own_rank) continue;
      for (int part = 0; part < static_cast<int>(parts.size()); ++part) {
        batch.sends.push_back({to_send(peer, part).data, part_bytes(part), peer});
        batch.receives.push_back({received(peer, part).data, part_bytes(part), peer});
      }
    }
    return comm.start(batch);
  }

  // Bytes that go to each peer.
  std::size_t bytes_per_peer() const {
    std::size_t bytes = 0;
    for (int part = 0; part < static_cast<int>(parts.size()); ++part) bytes += part_bytes(part);
    return bytes;
  }

  // Whether `part`'s pieces live in a tensor of the strategy (place).
  bool is_placed(int part) const { return placed[static_cast<std::size_t>(part)].data() != nullptr; }

 private:
  struct Placement {
    TensorView gathered;
    Side side = Side::send;
    const void* data() const { return gathered.data; }
  };

  std::size_t part_bytes(int part) const {
    const TensorView& shape = parts[static_cast<std::size_t>(part)];
    return static_cast<std::size_t>(shape.numel()) * dtype_size(shape.dtype);
  }

  TensorView piece(int peer, int part, Side side, const DeviceBuffer& buffer) const {
    const Placement& placement = placed[static_cast<std::size_t>(part)];
    TensorView tensor = parts[static_cast<std::size_t>(part)];
    // The own piece of a part that lands in a tensor is packed straight into it.
    if (placement.data() && (placement.side == side || peer == own_rank))
      return placement.gathered.slice(1, peer * tensor.size(1), tensor.size(1));
    tensor.device = device;
    tensor.data = static_cast<char*>(buffer.data()) + static_cast<std::size_t>(peer) * block_bytes +
                  part_offsets[static_cast<std::size_t>(part)];
    return tensor;
  }

  std::vector<TensorView> parts;  // shapes and dtypes, no data
  std::vector<std::size_t> part_offsets;
  std::vector<Placement> placed;  // per part: the strategy's tensor its pieces live in, or none
  std::size_t block_bytes = 0;
  Device device{};
  int own_rank = -1;            // in the communicator of allocate()
  int ranks = 0;                // of that communicator
  DeviceBuffer send_buffer;     // block p goes to rank p
  DeviceBuffer receive_buffer;  // block j comes from rank j
  TransferBatch batch;          // reused by every start, keeping its capacity
};

}  // namespace spattn
