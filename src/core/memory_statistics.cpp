#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/memory_ledger.hpp"
#include "spattn/memory_statistics.hpp"

namespace spattn {

namespace {

struct DeviceLedger {
  MemoryStatistics statistics;
  std::unordered_map<const void*, std::size_t> live;  // pointer -> bytes
};

// Allocations are rare (workspaces, once per plan), so one lock for every device is enough.
struct Ledger {
  std::mutex mutex;
  std::map<std::pair<int, int>, DeviceLedger> devices;  // (kind, index)

  DeviceLedger& of(const Device& device) { return devices[{static_cast<int>(device.kind), device.index}]; }
};

Ledger& ledger() {
  static Ledger* the_ledger = new Ledger;  // never destroyed: statics may release memory at exit
  return *the_ledger;
}

}  // namespace

void record_allocation(const Device& device, const void* pointer, std::size_t bytes) {
  Ledger& all = ledger();
  std::lock_guard<std::mutex> lock(all.mutex);
  DeviceLedger& entry = all.of(device);
  entry.live[pointer] = bytes;
  entry.statistics.allocations += 1;
  entry.statistics.bytes_in_use += static_cast<int64_t>(bytes);
  if (entry.statistics.bytes_in_use > entry.statistics.peak_bytes_in_use)
    entry.statistics.peak_bytes_in_use = entry.statistics.bytes_in_use;
}

void record_release(const Device& device, const void* pointer) {
  Ledger& all = ledger();
  std::lock_guard<std::mutex> lock(all.mutex);
  DeviceLedger& entry = all.of(device);
  const auto found = entry.live.find(pointer);
  if (found == entry.live.end()) return;
  entry.statistics.bytes_in_use -= static_cast<int64_t>(found->second);
  entry.live.erase(found);
}

MemoryStatistics memory_statistics(const Device& device) {
  Ledger& all = ledger();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.of(device).statistics;
}

void reset_peak_memory(const Device& device) {
  Ledger& all = ledger();
  std::lock_guard<std::mutex> lock(all.mutex);
  MemoryStatistics& statistics = all.of(device).statistics;
  statistics.peak_bytes_in_use = statistics.bytes_in_use;
}

}  // namespace spattn
