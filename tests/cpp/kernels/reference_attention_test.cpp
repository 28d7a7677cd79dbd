// The fp64 reference itself: closed-form cases and gradients against finite differences of
// the loss L = sum(out * dout).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "host_tensor.hpp"
#include "spattn/reference_attention.hpp"

namespace spattn::test {
namespace {

TEST(ReferenceAttention, ZeroQueriesAverageTheVisibleValues) {
  std::mt19937 generator(12);
  HostTensor q(DType::f32, {1, 6, 2, 3}), k(DType::f32, {1, 6, 1, 3}), v(DType::f32, {1, 6, 1, 3});
  q.fill(0.0f);  // every score 0: out is the mean of the visible values, lse = log(count)
  k.randomize(generator);
  v.randomize(generator);
  AttentionOptions options;
  options.causal = true;
  options.window_left = 2;
  const ReferenceResult result = reference_attention(q.view(), k.view(), v.view(), TensorView{}, options);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 6; ++i) {
      const int64_t first = std::max<int64_t>(i - 2, 0);
      const double count = static_cast<double>(i - first + 1);
      EXPECT_NEAR(result.lse[static_cast<std::size_t>(h * 6 + i)], std::log(count), 1e-12);
      for (int64_t d = 0; d < 3; ++d) {
        double mean = 0.0;
        for (int64_t j = first; j <= i; ++j) mean += v.at(j * 3 + d) / count;
        EXPECT_NEAR(result.out[static_cast<std::size_t>((i * 2 + h) * 3 + d)], mean, 1e-12);
      }
    }
  EXPECT_TRUE(result.dq.empty());
}

TEST(ReferenceAttention, CausalWithZeroLeftWindowSeesOnlyItself) {
  std::mt19937 generator(13);
  HostTensor q(DType::f32, {1, 4, 1, 2}), k(DType::f32, {1, 4, 1, 2}), v(DType::f32, {1, 4, 1, 2});
  for (HostTensor* tensor : {&q, &k, &v}) tensor->randomize(generator);
  AttentionOptions options;
  options.window_left = 0;
  options.window_right = 5;
  options.causal = true;  // caps the right bound at 0
  const ReferenceResult result = reference_attention(q.view(), k.view(), v.view(), TensorView{}, options);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t d = 0; d < 2; ++d)
      EXPECT_NEAR(result.out[static_cast<std::size_t>(i * 2 + d)], v.at(i * 2 + d), 1e-12);
    const double score = 1.0 / std::sqrt(2.0) * (static_cast<double>(q.at(i * 2)) * k.at(i * 2) +
                                                 static_cast<double>(q.at(i * 2 + 1)) * k.at(i * 2 + 1));
    EXPECT_NEAR(result.lse[static_cast<std::size_t>(i)], score, 1e-12);
  }
}

double loss(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& dout,
            const AttentionOptions& options) {
  const ReferenceResult result = reference_attention(q.view(), k.view(), v.view(), TensorView{}, options);
  const std::vector<double> weights = dout.values();
  double sum = 0.0;
  for (std::size_t i = 0; i < weights.size(); ++i) sum += result.out[i] * weights[i];
  return sum;
}

TEST(ReferenceAttention, GradientsMatchFiniteDifferences) {
  std::mt19937 generator(14);
  HostTensor q(DType::f32, {1, 5, 4, 6}), k(DType::f32, {1, 5, 2, 6}), v(DType::f32, {1, 5, 2, 6}),
      dout(DType::f32, {1, 5, 4, 6});
  for (HostTensor* tensor : {&q, &k, &v, &dout}) tensor->randomize(generator);
  AttentionOptions options;
  options.causal = true;
  options.window_left = 3;
  options.softmax_scale = 0.7f;
  const ReferenceResult result = reference_attention(q.view(), k.view(), v.view(), dout.view(), options);
  struct Input {
    HostTensor* tensor;
    const std::vector<double>* gradient;
  };
  for (const Input& input : {Input{&q, &result.dq}, Input{&k, &result.dk}, Input{&v, &result.dv}})
    for (int64_t i = 0; i < input.tensor->numel(); i += 7) {
      const float original = input.tensor->at(i);
      const float up = original + 1e-2f, down = original - 1e-2f;
      input.tensor->set(i, up);
      const double loss_up = loss(q, k, v, dout, options);
      input.tensor->set(i, down);
      const double loss_down = loss(q, k, v, dout, options);
      input.tensor->set(i, original);
      // dL/dx ~ (L(x + e) - L(x - e)) / 2e, to O(e^2)
      const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - down);
      EXPECT_NEAR((*input.gradient)[static_cast<std::size_t>(i)], numeric, 1e-3) << "element " << i;
    }
}

}  // namespace
}  // namespace spattn::test
