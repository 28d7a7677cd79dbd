#include "schedule/ulysses_stages.hpp"

namespace spattn {

int ulysses_stages(int64_t heads_per_rank, int64_t group_size, int ranks) {
  if (ranks <= 1 || group_size < 1) return 1;
  for (int stages = kMaxUlyssesStages; stages > 1; --stages)
    if (heads_per_rank % (stages * group_size) == 0) return stages;
  return 1;
}

}  // namespace spattn
