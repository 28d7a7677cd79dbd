#include "spattn/staged_mpi_communicator.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "spattn/error.hpp"
#include "spattn/mpi_communicator.hpp"

namespace spattn {

namespace {

// Regions of one staging buffer start at multiples of this (fp32 and wide copies stay aligned).
constexpr std::size_t kStagingAlignment = 256;

std::size_t aligned(std::size_t bytes) { return (bytes + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment; }

// Pinned (page-locked) host memory that only grows: the copies to and from it are truly
// asynchronous, and steady-state steps of one size allocate nothing.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  char* data() const { return data_; }
  std::size_t capacity() const { return capacity_; }

  // The caller makes sure that no copy still uses the old memory.
  void grow_to(std::size_t bytes) {
    if (bytes <= capacity_) return;
    // Doubling keeps slowly growing sizes from reallocating at every step.
    const std::size_t new_capacity = std::max(bytes, 2 * capacity_);
    if (data_ != nullptr) SPATTN_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    capacity_ = 0;
    void* memory = nullptr;
    SPATTN_CUDA_CHECK(cudaMallocHost(&memory, new_capacity));
    data_ = static_cast<char*>(memory);
    capacity_ = new_capacity;
  }

 private:
  char* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// The staging memory of one in-flight transfer. Several transfers may be in flight at once
// (a strategy may start the next step before waiting on this one), each with its own slot.
struct StagingSlot {
  PinnedBuffer send;
  PinnedBuffer receive;
  bool in_use = false;
};

// A region of device memory and where its bytes sit in a staging buffer.
struct StagedRegion {
  void* device = nullptr;
  std::size_t bytes = 0;
  std::size_t offset = 0;
};

// Appends a region at the next aligned offset of a buffer whose used length is `total`.
void append_region(std::vector<StagedRegion>& regions, std::size_t& total, void* device, std::size_t bytes) {
  regions.push_back(StagedRegion{device, bytes, total});
  total += aligned(bytes);
}

}  // namespace

struct StagedMpiCommunicator::State {
  std::unique_ptr<Communicator> host;
  int device_index = 0;
  cudaStream_t compute_stream = cudaStreamLegacy;
  cudaStream_t staging_stream = nullptr;
  cudaEvent_t compute_ready = nullptr;  // recorded on the compute stream by each start()
  cudaEvent_t copied_back = nullptr;    // recorded on the staging stream by each wait()
  std::vector<std::unique_ptr<StagingSlot>> slots;  // unique_ptr: a slot's address is stable

  StagingSlot& acquire_slot() {
    for (auto& slot : slots) {
      if (!slot->in_use) {
        slot->in_use = true;
        return *slot;
      }
    }
    slots.push_back(std::make_unique<StagingSlot>());
    slots.back()->in_use = true;
    return *slots.back();
  }

  // Copies the send regions into the slot's send buffer, after the compute stream's work so far,
  // and returns when the bytes are on the host: MPI here cannot read device memory (no CUDA-aware
  // build is assumed), so the host transfer may only start once the copies are complete.
  void stage_sends(StagingSlot& slot, const std::vector<StagedRegion>& sends, std::size_t send_bytes,
                   std::size_t receive_bytes) {
    cuda::CurrentDeviceGuard guard(device_index);
    if (slot.send.capacity() < send_bytes || slot.receive.capacity() < receive_bytes) {
      // Growing frees memory that an earlier wait()'s copy back may still be reading.
      SPATTN_CUDA_CHECK(cudaStreamSynchronize(staging_stream));
      slot.send.grow_to(send_bytes);
      slot.receive.grow_to(receive_bytes);
    }
    SPATTN_CUDA_CHECK(cudaEventRecord(compute_ready, compute_stream));
    SPATTN_CUDA_CHECK(cudaStreamWaitEvent(staging_stream, compute_ready, 0));
    for (const StagedRegion& region : sends) {
      if (region.bytes == 0) continue;
      SPATTN_CUDA_CHECK(cudaMemcpyAsync(slot.send.data() + region.offset, region.device, region.bytes,
                                        cudaMemcpyDeviceToHost, staging_stream));
    }
    // Also completes every earlier copy back out of this slot's receive buffer, which the host
    // transfer is about to overwrite.
    SPATTN_CUDA_CHECK(cudaStreamSynchronize(staging_stream));
  }
};

namespace {

// A host transfer over staging buffers, and where its received bytes go on the device.
class StagedPendingTransfer final : public PendingTransfer {
 public:
  explicit StagedPendingTransfer(StagingSlot& staging_slot) : slot(&staging_slot) {}
  ~StagedPendingTransfer() override {
    // Dropped without wait(): the host transfer's own destructor completes it before its
    // staging memory goes back to the pool.
    host.reset();
    release();
  }
  void release() {
    if (slot != nullptr) slot->in_use = false;
    slot = nullptr;
  }

  StagingSlot* slot;
  std::unique_ptr<PendingTransfer> host;
  std::vector<StagedRegion> receives;
};

}  // namespace

StagedMpiCommunicator::StagedMpiCommunicator(int device_index)
    : StagedMpiCommunicator(std::make_unique<MpiCommunicator>(), device_index) {}

StagedMpiCommunicator::StagedMpiCommunicator(std::unique_ptr<Communicator> host_communicator, int device_index)
    : state_(std::make_unique<State>()) {
  SPATTN_CHECK(host_communicator != nullptr, "the staged communicator needs a host communicator");
  SPATTN_CHECK(host_communicator->device() == Device::cpu(),
               "the staged communicator moves host memory through its host communicator, whose device is "
                   << device_name(host_communicator->device()));
  int device_count = 0;
  SPATTN_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  SPATTN_CHECK(device_index >= 0 && device_index < device_count,
               "device cuda:" << device_index << " does not exist; this process sees " << device_count << " GPU(s)");
  state_->host = std::move(host_communicator);
  state_->device_index = device_index;
  cuda::CurrentDeviceGuard guard(device_index);
  // Non-blocking: the staging stream must not serialize with the legacy default stream; the
  // events order it exactly where needed.
  SPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->staging_stream, cudaStreamNonBlocking));
  SPATTN_CUDA_CHECK(cudaEventCreateWithFlags(&state_->compute_ready, cudaEventDisableTiming));
  SPATTN_CUDA_CHECK(cudaEventCreateWithFlags(&state_->copied_back, cudaEventDisableTiming));
}

StagedMpiCommunicator::~StagedMpiCommunicator() {
  if (state_->staging_stream == nullptr) return;
  cuda::CurrentDeviceGuard guard(state_->device_index);
  // Copies back may still read the pinned buffers that the slots free.
  cudaStreamSynchronize(state_->staging_stream);
  state_->slots.clear();
  cudaEventDestroy(state_->copied_back);
  cudaEventDestroy(state_->compute_ready);
  cudaStreamDestroy(state_->staging_stream);
}

void StagedMpiCommunicator::set_compute_stream(void* stream) {
  state_->compute_stream = static_cast<cudaStream_t>(stream);
}

int StagedMpiCommunicator::rank() const { return state_->host->rank(); }
int StagedMpiCommunicator::size() const { return state_->host->size(); }
Device StagedMpiCommunicator::device() const { return Device{DeviceKind::cuda, state_->device_index}; }

std::size_t StagedMpiCommunicator::staging_bytes() const {
  std::size_t bytes = 0;
  for (const auto& slot : state_->slots) bytes += slot->send.capacity() + slot->receive.capacity();
  return bytes;
}

std::unique_ptr<PendingTransfer> StagedMpiCommunicator::start(const TransferBatch& batch) {
  std::vector<StagedRegion> sends;
  std::vector<StagedRegion> receives;
  std::size_t send_bytes = 0;
  std::size_t receive_bytes = 0;
  for (const PeerBuffer& send : batch.sends) append_region(sends, send_bytes, send.data, send.bytes);
  for (const PeerBuffer& receive : batch.receives) append_region(receives, receive_bytes, receive.data, receive.bytes);

  auto pending = std::make_unique<StagedPendingTransfer>(state_->acquire_slot());
  state_->stage_sends(*pending->slot, sends, send_bytes, receive_bytes);
  TransferBatch host_batch;
  for (std::size_t i = 0; i < sends.size(); ++i) {
    host_batch.sends.push_back(
        PeerBuffer{pending->slot->send.data() + sends[i].offset, sends[i].bytes, batch.sends[i].peer});
  }
  for (std::size_t i = 0; i < receives.size(); ++i) {
    host_batch.receives.push_back(
        PeerBuffer{pending->slot->receive.data() + receives[i].offset, receives[i].bytes, batch.receives[i].peer});
  }
  pending->host = state_->host->start(host_batch);
  pending->receives = std::move(receives);
  return pending;
}

std::unique_ptr<PendingTransfer> StagedMpiCommunicator::start_all_to_all(const void* send, void* receive,
                                                                         std::size_t bytes_per_rank) {
  const std::size_t bytes = bytes_per_rank * static_cast<std::size_t>(size());
  auto pending = std::make_unique<StagedPendingTransfer>(state_->acquire_slot());
  state_->stage_sends(*pending->slot, {StagedRegion{const_cast<void*>(send), bytes, 0}}, bytes, bytes);
  pending->host = state_->host->start_all_to_all(pending->slot->send.data(), pending->slot->receive.data(),
                                                 bytes_per_rank);
  pending->receives = {StagedRegion{receive, bytes, 0}};
  return pending;
}

std::unique_ptr<PendingTransfer> StagedMpiCommunicator::start_all_gather(const void* send, void* receive,
                                                                         std::size_t bytes_per_rank) {
  const std::size_t receive_bytes = bytes_per_rank * static_cast<std::size_t>(size());
  auto pending = std::make_unique<StagedPendingTransfer>(state_->acquire_slot());
  state_->stage_sends(*pending->slot, {StagedRegion{const_cast<void*>(send), bytes_per_rank, 0}}, bytes_per_rank,
                      receive_bytes);
  pending->host = state_->host->start_all_gather(pending->slot->send.data(), pending->slot->receive.data(),
                                                 bytes_per_rank);
  pending->receives = {StagedRegion{receive, receive_bytes, 0}};
  return pending;
}

std::unique_ptr<PendingTransfer> StagedMpiCommunicator::start_reduce_scatter_sum(const float* send, float* receive,
                                                                                std::size_t floats_per_rank) {
  const std::size_t receive_bytes = floats_per_rank * sizeof(float);
  const std::size_t send_bytes = receive_bytes * static_cast<std::size_t>(size());
  auto pending = std::make_unique<StagedPendingTransfer>(state_->acquire_slot());
  state_->stage_sends(*pending->slot, {StagedRegion{const_cast<float*>(send), send_bytes, 0}}, send_bytes,
                      receive_bytes);
  pending->host = state_->host->start_reduce_scatter_sum(reinterpret_cast<const float*>(pending->slot->send.data()),
                                                         reinterpret_cast<float*>(pending->slot->receive.data()),
                                                         floats_per_rank);
  pending->receives = {StagedRegion{receive, receive_bytes, 0}};
  return pending;
}

void StagedMpiCommunicator::wait(PendingTransfer& transfer) {
  auto& pending = dynamic_cast<StagedPendingTransfer&>(transfer);
  if (pending.host == nullptr) return;  // already waited
  state_->host->wait(*pending.host);
  pending.host.reset();
  cuda::CurrentDeviceGuard guard(state_->device_index);
  for (const StagedRegion& region : pending.receives) {
    if (region.bytes == 0) continue;
    SPATTN_CUDA_CHECK(cudaMemcpyAsync(region.device, pending.slot->receive.data() + region.offset, region.bytes,
                                      cudaMemcpyHostToDevice, state_->staging_stream));
  }
  // The compute stream waits for the copies; the host does not. The slot may be reused at once:
  // the next start() on it synchronizes the staging stream before anything overwrites it.
  SPATTN_CUDA_CHECK(cudaEventRecord(state_->copied_back, state_->staging_stream));
  SPATTN_CUDA_CHECK(cudaStreamWaitEvent(state_->compute_stream, state_->copied_back, 0));
  pending.release();
}

std::unique_ptr<Communicator> StagedMpiCommunicator::split(int color, int key) {
  auto part = std::make_unique<StagedMpiCommunicator>(state_->host->split(color, key), state_->device_index);
  part->set_compute_stream(state_->compute_stream);
  return part;
}

void StagedMpiCommunicator::barrier() { state_->host->barrier(); }

void StagedMpiCommunicator::host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) {
  state_->host->host_all_gather(send, receive, bytes_per_rank);
}

}  // namespace spattn
