#pragma once
// Checks that every Communicator of device memory must pass (the staged MPI one, the NCCL one),
// written once against the Communicator interface. Each is collective over the communicator:
// every rank calls it. Data goes in and comes out through device buffers, verified on the host.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "spattn/communicator.hpp"

namespace spattn::test {

/// The fewest CUDA devices that any rank of the test run sees (0 where the driver is missing):
/// the same number on every rank, so every rank skips, or none does.
int fewest_gpus_over_ranks();

/// GPU memory of a test, on the current device.
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes);
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  /// Copies `host` in and waits until it is there.
  void upload(const std::vector<unsigned char>& host);
  /// The bytes once the device has finished everything issued so far.
  std::vector<unsigned char> download() const;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// The checks. `compute` is the compute stream the communicator was given (for the checks that
// issue their own work on it); the others use the legacy default stream.
void check_batch_in_any_peer_order(Communicator& communicator);
void check_large_messages(Communicator& communicator);
void check_all_to_all(Communicator& communicator);
void check_all_gather(Communicator& communicator);
void check_reduce_scatter_sum(Communicator& communicator);
void check_two_transfers_in_flight(Communicator& communicator);
void check_split(Communicator& communicator);
void check_control_plane(Communicator& communicator);
void check_ordered_after_compute_stream(Communicator& communicator, cudaStream_t compute);

}  // namespace spattn::test
