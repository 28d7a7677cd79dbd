// GoogleTest under mpirun: every rank runs every test (the tests are collective); rank 0 prints,
// and the process exits non-zero on every rank when a test failed on any rank. When every test
// was skipped on every rank (the GPU suites on a machine without a GPU), rank 0 says so in the
// line that CTest's SKIP_REGULAR_EXPRESSION looks for, so such a run shows as skipped.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
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
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  const auto& unit = *::testing::UnitTest::GetInstance();
  const int all_skipped = unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count() ? 1 : 0;
  const int mine[2] = {failed, all_skipped};
  std::vector<int> everyone(2 * static_cast<std::size_t>(world.size()));
  world.host_all_gather(mine, everyone.data(), sizeof(mine));
  int any_failed = 0;
  int skipped_everywhere = 1;
  for (int rank = 0; rank < world.size(); ++rank) {
    any_failed = std::max(any_failed, everyone[2 * static_cast<std::size_t>(rank)]);
    skipped_everywhere = std::min(skipped_everywhere, everyone[2 * static_cast<std::size_t>(rank) + 1]);
  }
  if (world.rank() == 0 && skipped_everywhere && !any_failed) {
    std::printf("spattn: every test was skipped on every rank\n");
    std::fflush(stdout);
  }
  // Every rank is here and alive: finalize now. spattn's own finalize at exit stands down in a
  // process that gave up on a peer (the stalled-rank tests do), lest it wait for a dead one.
  MPI_Finalize();
  return any_failed;
}
