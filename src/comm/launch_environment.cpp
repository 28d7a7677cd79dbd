#include "spattn/launch_environment.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "spattn/error.hpp"

namespace spattn {

namespace {

// The variables by which MPI launchers (Open MPI, PMIx, MPICH's PMI) give each process its rank.
constexpr const char* kMpiLauncherRankVariables[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};

constexpr const char kLaunchVariables[] = "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT";

// `text` as a decimal integer, or false when it is not one (empty, trailing characters, beyond long).
bool parse_integer(const char* text, long& value) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtol(text, &end, 10);
  return errno == 0 && *end == '\0';
}

const char* required_variable(const char* name) {
  const char* value = std::getenv(name);
  SPATTN_CHECK(value != nullptr && *value != '\0', name << " is not set; a job started without mpirun needs "
                                                        << kLaunchVariables
                                                        << " in every process's environment (torchrun sets them)");
  return value;
}

// The integer in variable `name`, which must lie in [lowest, highest]; `allowed` says so in words.
int integer_variable(const char* name, long lowest, long highest, const std::string& allowed) {
  const char* text = required_variable(name);
  long value = 0;
  SPATTN_CHECK(parse_integer(text, value) && value >= lowest && value <= highest,
               name << "='" << text << "' is not allowed; allowed: " << allowed);
  return static_cast<int>(value);
}

}  // namespace

int launcher_rank() {
  long rank = 0;
  for (const char* name : kMpiLauncherRankVariables)
    if (const char* value = std::getenv(name)) return parse_integer(value, rank) ? static_cast<int>(rank) : 0;
  return parse_integer(std::getenv("RANK"), rank) ? static_cast<int>(rank) : 0;
}

bool launched_by_environment() {
  for (const char* name : kMpiLauncherRankVariables)
    if (std::getenv(name)) return false;
  return std::getenv("WORLD_SIZE") != nullptr;
}

LaunchEnvironment launch_environment() {
  constexpr long kMostRanks = 1L << 20;  // far beyond any job, so that a typo is caught
  constexpr long kHighestPort = 65535;
  LaunchEnvironment launch;
  launch.world_size =
      integer_variable("WORLD_SIZE", 1, kMostRanks, "an integer 1.." + std::to_string(kMostRanks) + ", the ranks");
  launch.rank = integer_variable("RANK", 0, launch.world_size - 1,
                                 "an integer 0.." + std::to_string(launch.world_size - 1) +
                                     " (WORLD_SIZE=" + std::to_string(launch.world_size) + ")");
  launch.master_addr = required_variable("MASTER_ADDR");
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool beside_agent_store = agent_store != nullptr && std::string(agent_store) == "True";
  const long highest_port = beside_agent_store ? kHighestPort - 1 : kHighestPort;
  launch.master_port = integer_variable(
      "MASTER_PORT", 1, highest_port,
      "an integer 1.." + std::to_string(highest_port) + ", a TCP port" +
          (beside_agent_store ? " (rank 0 listens above MASTER_PORT, beside torchrun's agent store)" : ""));
  if (beside_agent_store) {
    // Enough that ports held by this machine's own connections (which take ports near a freshly
    // picked one) leave a free one, few enough that ranks looking for rank 0 find it at once.
    constexpr int kPortsAboveTheAgentStore = 16;
    launch.first_rendezvous_port = launch.master_port + 1;
    launch.rendezvous_port_count =
        static_cast<int>(std::min<long>(kPortsAboveTheAgentStore, kHighestPort - launch.master_port));
  } else {
    launch.first_rendezvous_port = launch.master_port;
    launch.rendezvous_port_count = 1;
  }
  return launch;
}

}  // namespace spattn
