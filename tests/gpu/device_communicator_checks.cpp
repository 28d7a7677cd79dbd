#include "device_communicator_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>

#include "distributed_world.hpp"
#include "core/cuda/cuda_check.hpp"

namespace spattn::test {

namespace {

// The byte at `index` of the message from rank `source` to rank `target`: differs between
// messages, and along one message (so a shifted or truncated copy shows).
unsigned char pattern(int source, int target, std::size_t index) {
  return static_cast<unsigned char>(source * 131 + target * 31 + index * 7 + (index >> 8));
}

std::vector<unsigned char> message(int source, int target, std::size_t bytes) {
  std::vector<unsigned char> host(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = pattern(source, target, i);
  return host;
}

// EXPECTs that `actual` is the message from `source` to `target`, reporting the first mismatch.
void expect_message(const std::vector<unsigned char>& actual, int source, int target, std::size_t offset,
                    std::size_t bytes, const std::string& what) {
  for (std::size_t i = 0; i < bytes; ++i) {
    if (actual[offset + i] != pattern(source, target, i)) {
      ADD_FAILURE() << what << ": byte " << i << " of the message from rank " << source << " to rank " << target
                    << " is " << int(actual[offset + i]) << ", expected " << int(pattern(source, target, i));
      return;
    }
  }
}

std::vector<unsigned char> float_bytes(const std::vector<float>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Sends `bytes_of(source, target)` bytes from every rank to every rank (itself included) in one
// batch, sends and receives listed in an order shuffled differently on every rank.
template <typename BytesOf>
void exchange_with_every_peer(Communicator& communicator, BytesOf&& bytes_of, const std::string& what) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  std::vector<std::unique_ptr<DeviceBytes>> sends;
  std::vector<std::unique_ptr<DeviceBytes>> receives;
  TransferBatch batch;
  for (int peer = 0; peer < size; ++peer) {
    sends.push_back(std::make_unique<DeviceBytes>(bytes_of(rank, peer)));
    sends.back()->upload(message(rank, peer, bytes_of(rank, peer)));
    receives.push_back(std::make_unique<DeviceBytes>(bytes_of(peer, rank)));
    batch.sends.push_back(PeerBuffer{sends.back()->data(), bytes_of(rank, peer), peer});
    batch.receives.push_back(PeerBuffer{receives.back()->data(), bytes_of(peer, rank), peer});
  }
  std::mt19937 generator(static_cast<unsigned>(1000 + rank));
  std::shuffle(batch.sends.begin(), batch.sends.end(), generator);
  std::shuffle(batch.receives.begin(), batch.receives.end(), generator);
  auto pending = communicator.start(batch);
  communicator.wait(*pending);
  for (int peer = 0; peer < size; ++peer) {
    expect_message(receives[static_cast<std::size_t>(peer)]->download(), peer, rank, 0, bytes_of(peer, rank), what);
  }
}

}  // namespace

int fewest_gpus_over_ranks() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess) device_count = 0;
  std::vector<int> counts(static_cast<std::size_t>(world().size()));
  world().host_all_gather(&device_count, counts.data(), sizeof(int));
  return *std::min_element(counts.begin(), counts.end());
}

DeviceBytes::DeviceBytes(std::size_t bytes) : bytes_(bytes) {
  SPATTN_CUDA_CHECK(cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)));
  // Not the pattern of any message: a receive that never happened shows.
  SPATTN_CUDA_CHECK(cudaMemset(data_, 0xEE, std::max<std::size_t>(bytes, 1)));
  // cudaMemset runs on the legacy default stream, which the communicators' non-blocking streams
  // do not wait for: finish it before any transfer could touch the buffer.
  SPATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceBytes::~DeviceBytes() { cudaFree(data_); }

void DeviceBytes::upload(const std::vector<unsigned char>& host) {
  SPATTN_CUDA_CHECK(cudaMemcpy(data_, host.data(), std::min(host.size(), bytes_), cudaMemcpyHostToDevice));
  // Complete before a transfer on any other stream (a non-blocking one) reads it.
  SPATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<unsigned char> DeviceBytes::download() const {
  SPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> host(bytes_);
  SPATTN_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost));
  return host;
}

void check_batch_in_any_peer_order(Communicator& communicator) {
  // Sizes differ for every (source, target), so a message delivered to the wrong receive shows.
  exchange_with_every_peer(
      communicator, [](int source, int target) { return std::size_t(1000 + 37 * source + 11 * target); },
      "batch in any peer order");
}

void check_large_messages(Communicator& communicator) {
  // Far beyond any eager or chunk size, and odd, so no alignment hides a short copy.
  exchange_with_every_peer(
      communicator, [](int source, int target) { return std::size_t((24u << 20) + 3 + source + 2 * target); },
      "large messages");
}

void check_all_to_all(Communicator& communicator) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  const std::size_t bytes_per_rank = 4099;
  std::vector<unsigned char> host;
  for (int target = 0; target < size; ++target) {
    const auto block = message(rank, target, bytes_per_rank);
    host.insert(host.end(), block.begin(), block.end());
  }
  DeviceBytes send(host.size());
  DeviceBytes receive(host.size());
  send.upload(host);
  auto pending = communicator.start_all_to_all(send.data(), receive.data(), bytes_per_rank);
  communicator.wait(*pending);
  const auto received = receive.download();
  for (int source = 0; source < size; ++source) {
    expect_message(received, source, rank, bytes_per_rank * static_cast<std::size_t>(source), bytes_per_rank,
                   "all-to-all");
  }
}

void check_all_gather(Communicator& communicator) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  const std::size_t bytes_per_rank = 5003;
  DeviceBytes send(bytes_per_rank);
  DeviceBytes receive(bytes_per_rank * static_cast<std::size_t>(size));
  send.upload(message(rank, 0, bytes_per_rank));
  auto pending = communicator.start_all_gather(send.data(), receive.data(), bytes_per_rank);
  communicator.wait(*pending);
  const auto received = receive.download();
  for (int source = 0; source < size; ++source) {
    expect_message(received, source, 0, bytes_per_rank * static_cast<std::size_t>(source), bytes_per_rank,
                   "all-gather");
  }
}

void check_reduce_scatter_sum(Communicator& communicator) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  const std::size_t floats_per_rank = 2053;
  // Small integers: every sum is exact in fp32 whatever order the ranks are added in.
  std::vector<float> values(floats_per_rank * static_cast<std::size_t>(size));
  for (int block = 0; block < size; ++block) {
    for (std::size_t i = 0; i < floats_per_rank; ++i) {
      values[static_cast<std::size_t>(block) * floats_per_rank + i] = float((rank + 1) * (block + 1) + int(i % 7));
    }
  }
  DeviceBytes send(values.size() * sizeof(float));
  DeviceBytes receive(floats_per_rank * sizeof(float));
  send.upload(float_bytes(values));
  auto pending = communicator.start_reduce_scatter_sum(static_cast<const float*>(send.data()),
                                                       static_cast<float*>(receive.data()), floats_per_rank);
  communicator.wait(*pending);
  const auto received = receive.download();
  std::vector<float> sums(floats_per_rank);
  std::memcpy(sums.data(), received.data(), received.size());
  for (std::size_t i = 0; i < floats_per_rank; ++i) {
    // sum over ranks r of (r + 1)(block + 1) + i % 7, for block = this rank
    const float expected = float((rank + 1) * size * (size + 1) / 2 + size * int(i % 7));
    if (sums[i] != expected) {
      ADD_FAILURE() << "reduce-scatter: element " << i << " on rank " << rank << " is " << sums[i] << ", expected "
                    << expected;
      return;
    }
  }
}

void check_two_transfers_in_flight(Communicator& communicator) {
  // A strategy may start the next step before waiting on this one; waited in the other order.
  const int rank = communicator.rank();
  const int size = communicator.size();
  const std::size_t bytes_per_rank = 3001;
  const std::size_t all_bytes = bytes_per_rank * static_cast<std::size_t>(size);
  DeviceBytes gather_send(bytes_per_rank);
  DeviceBytes gather_receive(all_bytes);
  gather_send.upload(message(rank, 1, bytes_per_rank));
  std::vector<unsigned char> to_all;
  for (int target = 0; target < size; ++target) {
    const auto block = message(rank, target, bytes_per_rank);
    to_all.insert(to_all.end(), block.begin(), block.end());
  }
  DeviceBytes all_send(all_bytes);
  DeviceBytes all_receive(all_bytes);
  all_send.upload(to_all);
  auto first = communicator.start_all_gather(gather_send.data(), gather_receive.data(), bytes_per_rank);
  auto second = communicator.start_all_to_all(all_send.data(), all_receive.data(), bytes_per_rank);
  communicator.wait(*second);
  communicator.wait(*first);
  const auto gathered = gather_receive.download();
  const auto exchanged = all_receive.download();
  for (int source = 0; source < size; ++source) {
    const std::size_t offset = bytes_per_rank * static_cast<std::size_t>(source);
    expect_message(gathered, source, 1, offset, bytes_per_rank, "all-gather started first");
    expect_message(exchanged, source, rank, offset, bytes_per_rank, "all-to-all started second");
  }
}

void check_split(Communicator& communicator) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  // Two halves by parity, each ordered by descending rank (the key reverses the order).
  const int color = rank % 2;
  std::vector<int> members;
  for (int other = size - 1; other >= 0; --other) {
    if (other % 2 == color) members.push_back(other);
  }
  auto part = communicator.split(color, size - rank);
  ASSERT_EQ(part->size(), static_cast<int>(members.size()));
  ASSERT_EQ(part->rank(), static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()));
  EXPECT_EQ(part->device(), communicator.device());

  DeviceBytes send(sizeof(int));
  DeviceBytes receive(sizeof(int) * members.size());
  std::vector<unsigned char> mine(sizeof(int));
  std::memcpy(mine.data(), &rank, sizeof(int));
  send.upload(mine);
  auto pending = part->start_all_gather(send.data(), receive.data(), sizeof(int));
  part->wait(*pending);
  const auto received = receive.download();
  std::vector<int> gathered(members.size());
  std::memcpy(gathered.data(), received.data(), received.size());
  EXPECT_EQ(gathered, members);
  part->barrier();
}

void check_control_plane(Communicator& communicator) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  const int64_t mine[2] = {rank, 1000 + rank};
  std::vector<int64_t> all(2 * static_cast<std::size_t>(size));
  communicator.host_all_gather(mine, all.data(), sizeof(mine));
  for (int source = 0; source < size; ++source) {
    EXPECT_EQ(all[2 * static_cast<std::size_t>(source)], source);
    EXPECT_EQ(all[2 * static_cast<std::size_t>(source) + 1], 1000 + source);
  }
  communicator.barrier();
}

void check_ordered_after_compute_stream(Communicator& communicator, cudaStream_t compute) {
  const int rank = communicator.rank();
  const int size = communicator.size();
  const std::size_t bytes_per_rank = 1 << 20;
  DeviceBytes busy(256u << 20);
  DeviceBytes send(bytes_per_rank);
  DeviceBytes receive(bytes_per_rank * static_cast<std::size_t>(size));
  // No host synchronization anywhere below: the send buffer is written on the compute stream
  // behind a long memset, and read back on it. Only the communicator's events order the transfer.
  for (int round = 1; round <= 3; ++round) {
    SPATTN_CUDA_CHECK(cudaMemsetAsync(busy.data(), round, busy.bytes(), compute));
    SPATTN_CUDA_CHECK(cudaMemsetAsync(send.data(), 16 * round + rank, bytes_per_rank, compute));
    auto pending = communicator.start_all_gather(send.data(), receive.data(), bytes_per_rank);
    communicator.wait(*pending);
    std::vector<unsigned char> received(receive.bytes());
    SPATTN_CUDA_CHECK(cudaMemcpyAsync(received.data(), receive.data(), received.size(), cudaMemcpyDeviceToHost, compute));
    SPATTN_CUDA_CHECK(cudaStreamSynchronize(compute));
    for (int source = 0; source < size; ++source) {
      const unsigned char expected = static_cast<unsigned char>(16 * round + source);
      const auto block = received.begin() + static_cast<std::ptrdiff_t>(bytes_per_rank * static_cast<std::size_t>(source));
      const auto wrong = std::find_if(block, block + static_cast<std::ptrdiff_t>(bytes_per_rank),
                                      [&](unsigned char byte) { return byte != expected; });
      EXPECT_TRUE(wrong == block + static_cast<std::ptrdiff_t>(bytes_per_rank))
          << "round " << round << ": block of rank " << source << " has " << int(*wrong) << " at byte "
          << (wrong - block) << ", expected " << int(expected);
    }
  }
}

}  // namespace spattn::test
