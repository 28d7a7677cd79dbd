#pragma once
// The cost model's traffic of single steps (include/spattn/cost_model.hpp has the model and its
// assumptions): what each rank sends to each other rank in a step of a rotation along a cycle
// schedule, and how long the slowest rank's sends take on a cluster. Internal because the
// schedules are; `spattn plan` shows them step by step. Implemented with the rest of the model in
// cost_model.cpp.

#include <cstdint>
#include <vector>

#include "schedule/cycle_schedule.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/cost_model.hpp"
#include "spattn/dtype.hpp"

namespace spattn {

/// Bytes each rank sends to each other rank in one step: bytes[r][p] in messages[r][p] messages.
struct StepTraffic {
  std::vector<std::vector<int64_t>> bytes;
  std::vector<std::vector<int>> messages;
};

/// One step of a rotation along `schedule`: every rank sends each of its slots, `slot_bytes`
/// each, to the slot's next rank, one message per slot.
StepTraffic rotation_traffic(const CycleSchedule& schedule, int64_t slot_bytes);

/// Bytes of one slot when a rank's keys and values (S/N tokens of HK heads) are cut into `slots`
/// slots of elements of `dtype`: 2 * B * (S/N) * HK * D * size(dtype) / slots.
int64_t kv_slot_bytes(const AttentionShape& shape, int ranks, int slots, DType dtype);

/// The transfer time of one step under the model's assumptions (spattn/cost_model.hpp). Throws Error when the traffic's
/// size differs from `ranks`, or the ranks do not fit on the cluster.
Transfer step_transfer(const Cluster& cluster, const StepTraffic& traffic);

}  // namespace spattn
