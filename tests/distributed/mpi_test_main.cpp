// GoogleTest under mpirun: every rank runs every test (the tests are collective); rank 0 prints,
// and the process exits non-zero on every rank when a test failed on any rank.

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "distributed_world.hpp"

namespace spattn {

MpiCommunicator& world() {
  static MpiCommunicator communicator;
  return communicator;
}

}  // namespace spattn

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  spattn::MpiCommunicator& world = spattn::world();
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int local_failure = RUN_ALL_TESTS() != 0 ? 1 : 0;
  std::vector<int> failures(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&local_failure, failures.data(), sizeof(int));
  return *std::max_element(failures.begin(), failures.end());
}
