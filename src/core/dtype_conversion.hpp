#pragma once
// Scalar conversions between fp32 and the 16-bit formats, rounding to nearest even.

#include <cstdint>
#include <cstring>

namespace spattn {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t result;
  if (exponent == 0x1fu) {
    result = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    result = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    result = sign;  // signed zero
  } else {
    // Subnormal half: normalize the mantissa into an fp32 normal.
    exponent = 113u;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    result = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &result, sizeof value);
  return value;
}

inline uint16_t float_to_fp16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (magnitude < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to nearest even.
    if (magnitude < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    // value / 2^-24 = mantissa * 2^(exponent - 126), with the implicit bit in mantissa.
    const uint32_t shift = 126u - exponent;
    const uint32_t kept = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const uint32_t rounded = kept + ((remainder > halfway || (remainder == halfway && (kept & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias 127 -> 15 and round the 13 dropped mantissa bits to nearest even.
  uint32_t rebiased = magnitude - 0x38000000u;
  rebiased += 0xfffu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rebiased >> 13));
}

}  // namespace spattn
