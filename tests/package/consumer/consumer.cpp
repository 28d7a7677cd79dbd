// Runs zigzag ring attention on one rank through the installed headers and library, and asks
// the installed cost model which strategy it would pick.
#include <spattn/cost_model.hpp>
#include <spattn/mpi_communicator.hpp>
#include <spattn/ring_attention.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  spattn::MpiCommunicator world;
  const int64_t B = 1, S = 8 * world.size(), H = 2, D = 16, local = S / world.size();
  std::vector<float> q(B * local * H * D, 0.5f), k(q.size(), 0.25f), v(q.size(), 1.0f), out(q.size(), NAN),
      lse(B * H * local, NAN);
  auto view = [&](std::vector<float>& data, std::initializer_list<int64_t> shape) {
    return spattn::TensorView::contiguous(data.data(), spattn::DType::f32, shape);
  };
  spattn::AttentionOptions options;
  options.causal = true;
  spattn::zigzag_ring_attention_forward(world, view(q, {B, local, H, D}), view(k, {B, local, H, D}),
                                        view(v, {B, local, H, D}), view(out, {B, local, H, D}),
                                        view(lse, {B, H, local}), options);
  // v is all ones, so every output is exactly one.
  for (float value : out)
    if (std::abs(value - 1.0f) > 1e-6f) return 1;
  const spattn::Cluster cluster = spattn::sized_cluster(spattn::cluster_preset("nvswitch"), 8, 0, 0);
  const spattn::AttentionShape shape{1, 65536, 32, 8, 128, spattn::DType::bf16};
  const auto costs = spattn::compare_strategies(cluster, shape, 8, options);
  const spattn::StrategyCost& fastest = spattn::fastest_strategy(costs, /*with_backward=*/true);
  if (!fastest.applies() || fastest.forward_seconds <= 0) return 2;
  std::printf("cost model: %s fastest at 64k tokens on 8 GPUs\n", spattn::algorithm_name(fastest.algorithm).c_str());
  std::puts("consumer ok");
  return 0;
}
