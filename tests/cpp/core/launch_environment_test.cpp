// A job started without mpirun: torchrun's variables are checked before any communication, with
// errors that name the variable, its value and what is allowed; and rank 0's rendezvous hands its
// data to every rank, refuses duplicate ranks and differing world sizes on every rank that came,
// and names the ranks that never came, within the timeout.

#include "spattn/launch_environment.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <map>
#include <string>
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
  EXPECT_EQ(launch.rendezvous_port, 29500);
}

TEST(LaunchEnvironment, BesideTorchrunsAgentStoreRankZeroListensOnePortHigher) {
  std::map<std::string, std::string> values = kTwoRanks;
  values["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  const LaunchVariables variables(values);
  EXPECT_EQ(launch_environment().rendezvous_port, 29501);
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

// Runs share_from_rank_zero in one thread per (rank, world size); returns each one's data or error.
std::vector<std::string> rendezvous(const std::vector<std::pair<int, int>>& ranks_and_sizes, double timeout) {
  const int port = test::free_tcp_port();
  std::vector<std::future<std::string>> results;
  for (const auto& [rank, world_size] : ranks_and_sizes)
    results.push_back(std::async(std::launch::async, [=] {
      const LaunchEnvironment launch{rank, world_size, "localhost", port, port};
      try {
        return share_from_rank_zero(launch, rank == 0 ? "the store's address" : "", timeout);
      } catch (const Error& error) {
        return std::string(error.what());
      }
    }));
  std::vector<std::string> outcomes;
  for (auto& result : results) outcomes.push_back(result.get());
  return outcomes;
}

TEST(Rendezvous, EveryRankGetsRankZerosData) {
  for (const std::string& outcome : rendezvous({{2, 3}, {0, 3}, {1, 3}}, 10)) EXPECT_EQ(outcome, "the store's address");
}

TEST(Rendezvous, TwoProcessesWithOneRankFailEveryRankThatCame) {
  for (const std::string& outcome : rendezvous({{0, 3}, {1, 3}, {1, 3}}, 10))
    EXPECT_THAT(outcome, HasSubstr("two processes have RANK=1; allowed: each of 0..2 in exactly one process"));
}

TEST(Rendezvous, DifferentWorldSizesFailEveryRankThatCame) {
  for (const std::string& outcome : rendezvous({{0, 2}, {1, 3}}, 10))
    EXPECT_THAT(outcome, HasSubstr("the process with RANK=1 has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2"));
}

TEST(Rendezvous, RanksThatNeverComeAreNamedWithinTheTimeout) {
  const std::vector<std::string> outcomes = rendezvous({{0, 4}, {2, 4}}, 0.5);
  EXPECT_THAT(outcomes[0], HasSubstr("rank 0 of 4 timed out after 0.5 s waiting for ranks 1, 3 to connect to "
                                     "MASTER_ADDR:MASTER_PORT (localhost:"));
  EXPECT_THAT(outcomes[1], HasSubstr("ranks 1, 3 to connect"));  // rank 0's verdict, passed on
  EXPECT_THAT(rendezvous({{1, 2}}, 0.5)[0],
              HasSubstr("rank 1 of 2 timed out after 0.5 s waiting for rank 0 to listen at MASTER_ADDR:MASTER_PORT"));
}

}  // namespace
}  // namespace spattn
