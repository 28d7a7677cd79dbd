#pragma once
/// \file device_communicator.hpp
/// The communicator of a job's device memory, chosen from the machine: one GPU per rank over
/// NCCL, or any number of ranks per GPU over MPI staged through the host. For jobs launched by
/// mpirun; frameworks with their own process groups build an NcclCommunicator themselves.

#include <memory>
#include <string>
#include <vector>

#include "spattn/communicator.hpp"
#include "spattn/device.hpp"

namespace spattn {

/// How device buffers travel between ranks.
enum class Transport {
  automatic,   ///< cpu: mpi; cuda: nccl when every rank has a GPU of its own, else staged_mpi
  mpi,         ///< MPI on host memory (cpu only)
  nccl,        ///< NCCL, one GPU per rank
  staged_mpi,  ///< MPI through pinned host buffers: several ranks may share a GPU
  oneccl,      ///< oneCCL on host memory (cpu only; built where oneCCL was found)
};

/// Every transport, in the order help texts list them.
const std::vector<Transport>& all_transports();
/// "auto", "mpi", "nccl", "staged-mpi" or "oneccl".
std::string transport_name(Transport transport);
/// Throws Error naming the allowed names.
Transport parse_transport(const std::string& name);

/// Where this rank's tensors live and how they travel.
struct DevicePlacement {
  Device device;                     ///< this rank's device
  Transport transport = Transport::mpi;  ///< resolved: never automatic
  int ranks_per_device = 1;          ///< the most ranks of the job that share one device
};

/// The device of this rank among the ranks of `world` that run on the same machine (same host
/// name): they are dealt round-robin over the machine's visible devices of `kind`. Collective
/// over `world`; every rank throws the same Error when a rank has no device of `kind` or when
/// `transport` cannot serve the placement (NCCL with two ranks on one GPU, a backend left out of
/// this build).
DevicePlacement place_on_devices(Communicator& world, DeviceKind kind, Transport transport);

/// The ranks of a job started without mpirun (launched_by_environment(), spattn/launch_environment.hpp)
/// for tensors on `kind` over `transport`: an OnecclCommunicator::from_environment(), since oneCCL is
/// the one transport that forms ranks without MPI. Throws Error, before any communication, for a
/// device kind other than cpu, a transport other than oneccl or automatic, or a build without
/// oneCCL, naming what works; else as from_environment() does.
std::unique_ptr<Communicator> make_environment_world(DeviceKind kind, Transport transport);

/// A communicator over the ranks of `world` (a host communicator such as MpiCommunicator, which
/// must outlive the result) for buffers on `placement.device`. Collective over `world`.
std::unique_ptr<Communicator> make_device_communicator(Communicator& world, const DevicePlacement& placement);

}  // namespace spattn
