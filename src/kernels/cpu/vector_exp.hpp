#pragma once
// exp(x) written with plain arithmetic so that `#pragma omp simd` loops vectorize it without
// -ffast-math (glibc only exposes its vector expf under __FAST_MATH__).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace spattn::cpu {

/// exp(x) to about 2 ulp for x <= 88; returns exactly 0 for x < -87.3 (including -inf), which
/// is how masked scores (-inf) become zero probabilities.
inline float exp_vectorizable(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // ln 2 split in two so n * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kLowest = -87.3f;  // exp(-87.3) is about the smallest normal float
  constexpr float kHighest = 88.3f;
  const float clamped = std::min(std::max(x, kLowest), kHighest);
  // x = n ln2 + r with |r| <= ln2 / 2, so exp(x) = 2^n exp(r).
  const float n = std::floor(clamped * kLog2e + 0.5f);
  const float r = clamped - n * kLn2High - n * kLn2Low;
  // exp(r) ~ 1 + r + r^2 (1/2 + r/6 + ...), Cephes' minimax coefficients.
  float polynomial = 1.9875691500e-4f;
  polynomial = polynomial * r + 1.3981999507e-3f;
  polynomial = polynomial * r + 8.3334519073e-3f;
  polynomial = polynomial * r + 4.1665795894e-2f;
  polynomial = polynomial * r + 1.6666665459e-1f;
  polynomial = polynomial * r + 5.0000001201e-1f;
  const float exp_r = polynomial * r * r + r + 1.0f;
  // 2^n built from its exponent bits.
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_to_n;
  std::memcpy(&two_to_n, &exponent_bits, sizeof two_to_n);
  return x < kLowest ? 0.0f : exp_r * two_to_n;
}

}  // namespace spattn::cpu
