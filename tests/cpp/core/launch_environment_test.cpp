// A job started without mpirun: torchrun's variables are checked before any communication, with
// errors that name the variable, its value and what is allowed; and rank 0's rendezvous hands its
// data to every rank, refuses duplicate ranks and differing world sizes on every rank that came,
// and names the ranks that never came, within the timeout; beside torchrun's agent store, rank 0
// listens at the first free port above MASTER_PORT and the others find it there, and not another
// job's rank 0.

#include "spattn/launch_environment.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm/rendezvous.hpp"
#include "free_tcp_port.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

constexpr const char* kTouchedVariables[] = {
    "RANK",      "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK", "PMI_RANK"};

// Every variable these tests touch, set as given (absent: unset) for the lifetime of the object and
// restored afterwards.
class LaunchVariables {
 public:
  explicit LaunchVariables(const std::map<std::string, std::string>& values) {
    for (const char* name : kTouchedVariables) {
      if (const char* old = std::getenv(name)) saved_[name] = old;
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ~LaunchVariables() {
    for (const char* name : kTouchedVariables) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

const std::map<std::string, std::string> kTwoRanks = {
    {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};

std::string refusal(std::map<std::string, std::string> values) {
  const LaunchVariables variables(values);
  try {
    launch_environment();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

std::map<std::string, std::string> with(std::string name, std::string value) {
  std::map<std::string, std::string> values = kTwoRanks;
  values[name] = value;
  return values;
}

std::map<std::string, std::string> without(const std::string& name) {
  std::map<std::string, std::string> values = kTwoRanks;
  values.erase(name);
  return values;
}

TEST(LaunchEnvironment, ReadsTorchrunsVariables) {
  const LaunchVariables variables(kTwoRanks);
  const LaunchEnvironment launch = launch_environment();
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.world_size, 2);
  EXPECT_EQ(launch.master_addr, "127.0.0.1");
  EXPECT_EQ(launch.master_port, 29500);
  EXPECT_EQ(launch.first_rendezvous_port, 29500);
  EXPECT_EQ(launch.rendezvous_port_count, 1);
}

TEST(LaunchEnvironment, BesideTorchrunsAgentStoreRankZeroListensAboveMasterPort) {
  std::map<std::string, std::string> values = kTwoRanks;
  values["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  {
    const LaunchVariables variables(values);
    EXPECT_EQ(launch_environment().first_rendezvous_port, 29501);
    EXPECT_EQ(launch_environment().rendezvous_port_count, 16);
  }
  values["MASTER_PORT"] = "65530";
  {
    const LaunchVariables variables(values);
    EXPECT_EQ(launch_environment().first_rendezvous_port, 65531);
    EXPECT_EQ(launch_environment().rendezvous_port_count, 5);  // up to 65535
  }
  values["MASTER_PORT"] = "65535";
  EXPECT_THAT(refusal(values), HasSubstr("MASTER_PORT='65535' is not allowed; allowed: an integer 1..65534"));
}

TEST(LaunchEnvironment, MissingVariablesAreNamed) {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(refusal(without(name)), HasSubstr(std::string(name) + " is not set; a job started without mpirun "
                                                                      "needs RANK, WORLD_SIZE, MASTER_ADDR and "
                                                                      "MASTER_PORT"));
  }
}

TEST(LaunchEnvironment, BadValuesNameTheVariableTheValueAndWhatIsAllowed) {
  EXPECT_THAT(refusal(with("RANK", "2")),
              HasSubstr("RANK='2' is not allowed; allowed: an integer 0..1 (WORLD_SIZE=2)"));
  EXPECT_THAT(refusal(with("RANK", "1.0")), HasSubstr("RANK='1.0' is not allowed"));
  EXPECT_THAT(refusal(with("WORLD_SIZE", "0")), HasSubstr("WORLD_SIZE='0' is not allowed; allowed: an integer 1.."));
  EXPECT_THAT(refusal(with("WORLD_SIZE", "99999999999999999999")), HasSubstr("WORLD_SIZE='99999999999999999999'"));
  EXPECT_THAT(refusal(with("MASTER_PORT", "0")), HasSubstr("MASTER_PORT='0' is not allowed; allowed: an integer "
                                                           "1..65535"));
  EXPECT_THAT(refusal(with("MASTER_PORT", "")), HasSubstr("MASTER_PORT is not set"));
}

TEST(LaunchEnvironment, MpiLaunchersWinOverTorchrunsVariables) {
  {
    const LaunchVariables variables(kTwoRanks);
    EXPECT_TRUE(launched_by_environment());
    EXPECT_EQ(launcher_rank(), 1);
  }
  std::map<std::string, std::string> values = kTwoRanks;
  values["OMPI_COMM_WORLD_RANK"] = "0";
  const LaunchVariables variables(values);
  EXPECT_FALSE(launched_by_environment());
  EXPECT_EQ(launcher_rank(), 0);
}

// What rank 0 of the job at `launch.master_port` hands the others.
std::string store_address(const LaunchEnvironment& launch) {
  return "the store of the job at MASTER_PORT=" + std::to_string(launch.master_port);
}

// share_from_rank_zero for `process` in a thread of its own: its data or its error.
std::future<std::string> start(const LaunchEnvironment& process, double timeout) {
  return std::async(std::launch::async, [=] {
    try {
      return share_from_rank_zero(process, process.rank == 0 ? store_address(process) : "", timeout);
    } catch (const Error& error) {
      return std::string(error.what());
    }
  });
}

std::vector<std::string> rendezvous(const std::vector<LaunchEnvironment>& processes, double timeout) {
  std::vector<std::future<std::string>> results;
  for (const LaunchEnvironment& process : processes) results.push_back(start(process, timeout));
  std::vector<std::string> outcomes;
  for (auto& result : results) outcomes.push_back(result.get());
  return outcomes;
}

// The processes (rank, world size) of a job whose rank 0 listens at MASTER_PORT, a free port.
std::vector<LaunchEnvironment> job(const std::vector<std::pair<int, int>>& ranks_and_sizes) {
  const int port = test::free_tcp_port();
  std::vector<LaunchEnvironment> processes;
  for (const auto& [rank, world_size] : ranks_and_sizes)
    processes.push_back(LaunchEnvironment{rank, world_size, "localhost", port, port, 1});
  return processes;
}

// The processes of a job of `world_size` ranks beside torchrun's agent store at `master_port`, whose
// rank 0 may listen at any of the `port_count` ports above it.
std::vector<LaunchEnvironment> job_beside_agent_store(int world_size, int master_port, int port_count) {
  std::vector<LaunchEnvironment> processes;
  for (int rank = 0; rank < world_size; ++rank)
    processes.push_back(LaunchEnvironment{rank, world_size, "localhost", master_port, master_port + 1, port_count});
  return processes;
}

// A socket holding `port` on every interface, as something else on the machine would: listening
// and never answering (another service), or only bound (the port of one of the machine's own
// connections). held() is false when the port was taken already.
class PortInUse {
 public:
  PortInUse(int port, bool listening) : descriptor_(socket(AF_INET, SOCK_STREAM, 0)) {
    const sockaddr_in address = test::ipv4_address(INADDR_ANY, port);
    held_ = bind(descriptor_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
            (!listening || listen(descriptor_, 4) == 0);
  }
  PortInUse(const PortInUse&) = delete;
  PortInUse& operator=(const PortInUse&) = delete;
  ~PortInUse() { close(descriptor_); }
  bool held() const { return held_; }

 private:
  int descriptor_;
  bool held_ = false;
};

// Waits until something listens at `port` on this machine (connecting once it does).
void await_listener(int port) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    const int probe = socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in address = test::ipv4_address(INADDR_LOOPBACK, port);
    const bool listening = connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    close(probe);
    if (listening) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Runs `attempt(master_port)` with a free master port until it returns true: it returns false when
// a port above the master port that it needed free or held was taken by another process between
// probing and use, which a few attempts outlast. `needs` says what no attempt found.
template <class Attempt>
void with_free_master_port(const char* needs, const Attempt& attempt) {
  constexpr int kPortAttempts = 10;
  for (int tried = 0; tried < kPortAttempts; ++tried)
    if (attempt(test::free_tcp_port())) return;
  FAIL() << "no attempt found " << needs;
}

TEST(Rendezvous, EveryRankGetsRankZerosData) {
  const std::vector<LaunchEnvironment> processes = job({{2, 3}, {0, 3}, {1, 3}});
  for (const std::string& outcome : rendezvous(processes, 10)) EXPECT_EQ(outcome, store_address(processes[0]));
}

TEST(Rendezvous, TwoProcessesWithOneRankFailEveryRankThatCame) {
  for (const std::string& outcome : rendezvous(job({{0, 3}, {1, 3}, {1, 3}}), 10))
    EXPECT_THAT(outcome, HasSubstr("two processes have RANK=1; allowed: each of 0..2 in exactly one process"));
}

TEST(Rendezvous, DifferentWorldSizesFailEveryRankThatCame) {
  for (const std::string& outcome : rendezvous(job({{0, 2}, {1, 3}}), 10))
    EXPECT_THAT(outcome, HasSubstr("the process with RANK=1 has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2"));
}

TEST(Rendezvous, RanksThatNeverComeAreNamedWithinTheTimeout) {
  const std::vector<std::string> outcomes = rendezvous(job({{0, 4}, {2, 4}}), 0.5);
  EXPECT_THAT(outcomes[0], HasSubstr("rank 0 of 4 timed out after 0.5 s waiting for ranks 1, 3 to connect to "
                                     "MASTER_ADDR:MASTER_PORT (localhost:"));
  EXPECT_THAT(outcomes[1], HasSubstr("ranks 1, 3 to connect"));  // rank 0's verdict, passed on
  EXPECT_THAT(rendezvous(job({{1, 2}}), 0.5)[0],
              HasSubstr("rank 1 of 2 timed out after 0.5 s waiting for rank 0 to listen at MASTER_ADDR:MASTER_PORT"));
  const int master_port = test::free_tcp_port();
  EXPECT_THAT(rendezvous({job_beside_agent_store(2, master_port, 16)[1]}, 0.5)[0],
              HasSubstr("waiting for rank 0 to listen at MASTER_ADDR:MASTER_PORT+1..+16 (localhost:" +
                        std::to_string(master_port + 1) + ".." + std::to_string(master_port + 16) + ")"));
}

// torchrun picks a free MASTER_PORT for its agent store, but the ports above it may be in use: the
// CI once saw MASTER_PORT+1 taken by one of the machine's connections.
TEST(Rendezvous, BesideTheAgentStoreRanksFindRankZeroPastPortsInUse) {
  with_free_master_port("two free ports above two held ones", [](int master_port) {
    const PortInUse silent_service(master_port + 1, /*listening=*/true);
    const PortInUse connections_port(master_port + 2, /*listening=*/false);
    if (!silent_service.held() || !connections_port.held()) return false;
    const std::vector<LaunchEnvironment> processes = job_beside_agent_store(3, master_port, 4);
    const std::vector<std::string> outcomes = rendezvous(processes, 10);
    if (outcomes[0].find("cannot listen") != std::string::npos) return false;  // master_port+3 and +4 were taken
    for (const std::string& outcome : outcomes) EXPECT_EQ(outcome, store_address(processes[0]));
    return true;
  });
}

TEST(Rendezvous, RanksPassOverAnotherJobsRankZeroBesideTheirs) {
  // This job's rank 0 may listen at master_port+1..+4; the other job's rank 0 listens at
  // master_port+2, and master_port+1 is in use: the ranks find this job's rank 0 at master_port+3
  // after hearing the other's hello at master_port+2.
  with_free_master_port("the free ports the two jobs need", [](int master_port) {
    const PortInUse connections_port(master_port + 1, /*listening=*/false);
    if (!connections_port.held()) return false;
    const std::vector<LaunchEnvironment> other_job = job_beside_agent_store(2, master_port + 1, 1);
    std::future<std::string> other_rank_zero = start(other_job[0], 10);
    await_listener(master_port + 2);
    const std::vector<LaunchEnvironment> processes = job_beside_agent_store(3, master_port, 4);
    const std::vector<std::string> outcomes = rendezvous(processes, 10);
    const std::string other_rank_one = start(other_job[1], 10).get();
    const std::string other_outcome = other_rank_zero.get();
    if (other_outcome.find("cannot listen") != std::string::npos ||
        outcomes[0].find("cannot listen") != std::string::npos)
      return false;  // a port this test needs free was taken
    for (const std::string& outcome : outcomes) EXPECT_EQ(outcome, store_address(processes[0]));
    EXPECT_EQ(other_outcome, store_address(other_job[0]));
    EXPECT_EQ(other_rank_one, store_address(other_job[0]));
    return true;
  });
}

TEST(Rendezvous, RankZeroWithEveryPortInUseNamesThemAndWhatIsAllowed) {
  with_free_master_port("two ports above a free one to hold", [](int master_port) {
    const PortInUse first(master_port + 1, /*listening=*/true);
    const PortInUse second(master_port + 2, /*listening=*/false);
    if (!first.held() || !second.held()) return false;
    EXPECT_THAT(rendezvous({job_beside_agent_store(2, master_port, 2)[0]}, 10)[0],
                HasSubstr("rank 0 cannot listen at MASTER_ADDR:MASTER_PORT+1..+2 (localhost:" +
                          std::to_string(master_port + 1) + ".." + std::to_string(master_port + 2) +
                          ") (Address already in use); allowed: a MASTER_PORT with a free TCP port among the 2 "
                          "above it on rank 0's machine"));
    return true;
  });
}

}  // namespace
}  // namespace spattn
