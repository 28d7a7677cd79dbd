#include "spattn/device_communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "core/name_table.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/error.hpp"

#ifdef SPATTN_WITH_CUDA
#include "spattn/staged_mpi_communicator.hpp"
#endif
#ifdef SPATTN_WITH_NCCL
#include "spattn/nccl_communicator.hpp"
#endif
#ifdef SPATTN_WITH_ONECCL
#include "spattn/oneccl_communicator.hpp"
#endif

namespace spattn {

namespace {

constexpr std::size_t kHostNameBytes = 256;

// What each rank tells the others about itself.
struct RankMachine {
  std::array<char, kHostNameBytes> host{};
  int devices = 0;  // visible devices of the requested kind
};

// How the agreed fields read in an error.
std::string show_device_kind(int64_t kind) { return device_kind_name(static_cast<DeviceKind>(kind)); }
std::string show_transport(int64_t transport) { return transport_name(static_cast<Transport>(transport)); }

bool oneccl_built() {
#ifdef SPATTN_WITH_ONECCL
  return true;
#else
  return false;
#endif
}

bool nccl_built() {
#ifdef SPATTN_WITH_NCCL
  return true;
#else
  return false;
#endif
}

const NameTable<Transport>& transport_names() {
  static const NameTable<Transport> table("transport", {{Transport::automatic, "auto"},
                                                        {Transport::mpi, "mpi"},
                                                        {Transport::nccl, "nccl"},
                                                        {Transport::staged_mpi, "staged-mpi"},
                                                        {Transport::oneccl, "oneccl"}});
  return table;
}

}  // namespace

const std::vector<Transport>& all_transports() {
  static const std::vector<Transport> transports = transport_names().values();
  return transports;
}

std::string transport_name(Transport transport) { return transport_names().name(transport); }

Transport parse_transport(const std::string& name) { return transport_names().parse(name); }

DevicePlacement place_on_devices(Communicator& world, DeviceKind kind, Transport transport) {
  RankMachine mine;
  gethostname(mine.host.data(), kHostNameBytes - 1);
  mine.devices = visible_device_count(kind);
  std::vector<RankMachine> everyone(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&mine, everyone.data(), sizeof(RankMachine));

  // Local rank and size among the ranks of this machine; the most ranks any device carries.
  const auto same_machine = [](const RankMachine& a, const RankMachine& b) {
    return std::strncmp(a.host.data(), b.host.data(), kHostNameBytes) == 0;
  };
  int local_rank = 0;
  for (int rank = 0; rank < world.rank(); ++rank)
    if (same_machine(everyone[static_cast<std::size_t>(rank)], mine)) ++local_rank;
  int ranks_per_device = 1;
  for (const RankMachine& machine : everyone) {
    const auto local_size = std::count_if(everyone.begin(), everyone.end(),
                                          [&](const RankMachine& other) { return same_machine(other, machine); });
    if (machine.devices > 0)
      ranks_per_device = std::max(ranks_per_device, static_cast<int>((local_size + machine.devices - 1) / machine.devices));
  }

  DevicePlacement placement;
  std::string error;
  if (kind == DeviceKind::cpu) {
    placement.device = Device::cpu();
    placement.transport = transport == Transport::oneccl ? Transport::oneccl : Transport::mpi;
    if (transport == Transport::oneccl && !oneccl_built())
      error = "transport oneccl: this build of spattn has no oneCCL (scripts/install-dependencies.sh installs it, CMake "
              "SPATTN_ONECCL builds it); use mpi";
    else if (transport != Transport::automatic && transport != Transport::mpi && transport != Transport::oneccl)
      error = "transport " + transport_name(transport) + " moves GPU memory; cpu tensors travel over mpi or oneccl";
  } else {
    placement.device = Device{kind, mine.devices > 0 ? local_rank % mine.devices : 0};
    placement.ranks_per_device = ranks_per_device;
    placement.transport = transport;
    if (transport == Transport::automatic)
      placement.transport = nccl_built() && ranks_per_device == 1 ? Transport::nccl : Transport::staged_mpi;
    if (mine.devices == 0) {
      error = "rank " + std::to_string(world.rank()) + " on " + mine.host.data() +
              " sees no CUDA device (or this build of spattn has no CUDA backend)";
    } else if (placement.transport == Transport::mpi || placement.transport == Transport::oneccl) {
      error = "transport " + transport_name(placement.transport) +
              " moves host memory; GPU tensors travel over nccl or staged-mpi";
    } else if (placement.transport == Transport::nccl && !nccl_built()) {
      error = "transport nccl: this build of spattn has no NCCL; use staged-mpi";
    } else if (placement.transport == Transport::nccl && ranks_per_device > 1) {
      error = "transport nccl needs one GPU per rank, but " + std::to_string(ranks_per_device) +
              " ranks share a GPU (NCCL cannot put two ranks of one communicator on one GPU); use staged-mpi or "
              "fewer ranks per machine";
    }
  }
  agree_on_call(world, error,
                {{"device", static_cast<int64_t>(kind), show_device_kind}, {"transport", static_cast<int64_t>(transport),
                                                                           show_transport}});
  return placement;
}

std::unique_ptr<Communicator> make_environment_world(DeviceKind kind, Transport transport) {
  SPATTN_CHECK(kind == DeviceKind::cpu && (transport == Transport::oneccl || transport == Transport::automatic),
               "device " << device_kind_name(kind) << " over transport " << transport_name(transport)
                         << ": a job started without mpirun (WORLD_SIZE set, no MPI launcher) forms its ranks over "
                            "oneCCL only, which moves host memory: use device cpu with transport oneccl (or auto), "
                            "or start the job with mpirun for mpi, nccl and staged-mpi");
#ifdef SPATTN_WITH_ONECCL
  return OnecclCommunicator::from_environment();
#else
  SPATTN_FAIL(
      "a job started without mpirun (WORLD_SIZE set, no MPI launcher) forms its ranks over oneCCL, and this "
      "build of spattn has no oneCCL (scripts/install-dependencies.sh installs it, CMake SPATTN_ONECCL builds "
      "it); start the job with mpirun");
#endif
}

std::unique_ptr<Communicator> make_device_communicator(Communicator& world, const DevicePlacement& placement) {
  switch (placement.transport) {
    case Transport::mpi: return world.split(0, world.rank());
#ifdef SPATTN_WITH_ONECCL
    case Transport::oneccl: return std::make_unique<OnecclCommunicator>(world);
#endif
#ifdef SPATTN_WITH_CUDA
    case Transport::staged_mpi:
      return std::make_unique<StagedMpiCommunicator>(world.split(0, world.rank()), placement.device.index);
#endif
#ifdef SPATTN_WITH_NCCL
    case Transport::nccl: return std::make_unique<NcclCommunicator>(world, placement.device.index);
#endif
    default: break;
  }
  SPATTN_FAIL("transport " << transport_name(placement.transport) << " is not built into this spattn");
}

}  // namespace spattn
