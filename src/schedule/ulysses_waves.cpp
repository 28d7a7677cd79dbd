#include "schedule/ulysses_waves.hpp"

#include <algorithm>

namespace spattn {

namespace {

constexpr int64_t kMostWaves = 4;

// `heads` minus `other`, kv heads read by the wave before (`before`) or after: consecutive waves of
// consecutive query heads read kv heads in order and share at most one at either end.
HeadRange minus_neighbour(const HeadRange& heads, const HeadRange& other, bool before) {
  const int64_t end = heads.first + heads.count;
  if (other.count == 0) return heads;
  if (before) {
    const int64_t first = std::max(heads.first, other.first + other.count);
    return {first, std::max<int64_t>(0, end - first)};
  }
  return {heads.first, std::max<int64_t>(0, std::min(end, other.first) - heads.first)};
}

int64_t most_heads(const std::vector<HeadRange>& heads_of) {
  int64_t most = 0;
  for (const HeadRange& heads : heads_of) most = std::max(most, heads.count);
  return most;
}

}  // namespace

HeadRange kv_heads_read(const HeadRange& query_heads, int64_t group_size) {
  const int64_t first = query_heads.first / group_size;
  const int64_t last = (query_heads.first + query_heads.count - 1) / group_size;
  return {first, last - first + 1};
}

int64_t UlyssesWave::most_kv_arriving() const { return most_heads(kv_arriving_of); }
int64_t UlyssesWave::most_kv_leaving() const { return most_heads(kv_leaving_of); }

int64_t ulysses_wave_count(int64_t heads, int64_t kv_heads, int ranks) {
  const int64_t heads_per_rank = heads / ranks;
  const int64_t one_wave = plan_ulysses_waves(heads, kv_heads, ranks, 1).front().most_kv_arriving();
  for (int64_t waves = std::min(kMostWaves, heads_per_rank); waves > 1; --waves) {
    if (heads_per_rank % waves != 0) continue;
    int64_t arriving = 0, leaving = 0;
    for (const UlyssesWave& wave : plan_ulysses_waves(heads, kv_heads, ranks, waves)) {
      arriving += wave.most_kv_arriving();
      leaving += wave.most_kv_leaving();
    }
    if (arriving == one_wave && leaving == one_wave) return waves;
  }
  return 1;
}

std::vector<UlyssesWave> plan_ulysses_waves(int64_t heads, int64_t kv_heads, int ranks, int64_t waves) {
  const int64_t heads_per_rank = heads / ranks;
  const int64_t heads_per_wave = heads_per_rank / waves;
  const int64_t group_size = heads / kv_heads;
  std::vector<UlyssesWave> plan(static_cast<std::size_t>(waves));
  for (int64_t index = 0; index < waves; ++index) {
    UlyssesWave& wave = plan[static_cast<std::size_t>(index)];
    for (int rank = 0; rank < ranks; ++rank) {
      const HeadRange query{rank * heads_per_rank + index * heads_per_wave, heads_per_wave};
      const HeadRange read = kv_heads_read(query, group_size);
      const HeadRange read_before =
          index > 0 ? kv_heads_read({query.first - heads_per_wave, heads_per_wave}, group_size) : HeadRange{};
      const HeadRange read_after =
          index + 1 < waves ? kv_heads_read({query.first + heads_per_wave, heads_per_wave}, group_size) : HeadRange{};
      wave.query_of.push_back(query);
      wave.kv_arriving_of.push_back(minus_neighbour(read, read_before, /*before=*/true));
      wave.kv_leaving_of.push_back(minus_neighbour(read, read_after, /*before=*/false));
    }
  }
  return plan;
}

}  // namespace spattn
