#include "shared_device_communicators.hpp"

#include <map>
#include <memory>

#include "distributed_world.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/error.hpp"

namespace spattn {

Communicator* shared_device_communicator(Transport transport, std::string& why_not) {
  static std::map<Transport, std::unique_ptr<Communicator>> made;
  static std::map<Transport, std::string> refused;
  if (refused.count(transport) == 0 && made.count(transport) == 0) {
    try {
      made[transport] = make_device_communicator(world(), place_on_devices(world(), DeviceKind::cuda, transport));
    } catch (const Error& error) {  // agreed: every rank refuses together
      refused[transport] = error.what();
    }
  }
  if (refused.count(transport)) {
    why_not = refused[transport];
    return nullptr;
  }
  return made[transport].get();
}

Communicator* gpu_case_communicator(Algorithm algorithm, Transport transport, AlgorithmSetup& setup,
                                    std::string& why_skipped) {
  if (visible_device_count(DeviceKind::cuda) == 0) {
    why_skipped = "no CUDA device";
    return nullptr;
  }
  Communicator* communicator = shared_device_communicator(transport, why_skipped);
  if (communicator == nullptr) return nullptr;
  setup = algorithm_setup(algorithm, world().size());
  why_skipped = setup.not_applicable;
  return why_skipped.empty() ? communicator : nullptr;
}

AttentionShape gpu_case_shape(const AlgorithmSetup& setup) {
  const int ranks = world().size();
  return AttentionShape{1, 8 * setup.length_unit, 2 * ranks, ranks, 128, DType::bf16};
}

std::string transport_case_name(Transport transport) { return transport == Transport::nccl ? "nccl" : "staged"; }

std::string algorithm_transport_case_name(const ::testing::TestParamInfo<std::tuple<Algorithm, Transport>>& info) {
  return algorithm_name(std::get<0>(info.param)) + "_" + transport_case_name(std::get<1>(info.param));
}

}  // namespace spattn
