#pragma once
// The fp64 reference of one attention block (queries at a global position against key segments
// at global positions, masks in global positions, GQA) and the comparison of a GPU result with
// it: shared by the tests of the cuDNN path and of the own Hopper kernels.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.hpp"
#include "spattn/attention_options.hpp"

namespace spattn::test {

struct SegmentSpec {
  int64_t keys;
  int64_t position;
};

struct BlockCase {
  std::string name;
  int64_t q_rows;
  int64_t q_position;
  std::vector<SegmentSpec> segments;
  AttentionMask mask;
  int64_t batch = 2;
  int64_t heads = 8;
  int64_t kv_heads = 2;  // heads % kv_heads == 0
};

/// The inputs and fp64 results of one block: queries over the concatenation of the segments.
struct BlockProblem {
  HostTensor q, dout;
  std::vector<HostTensor> k, v;
  std::vector<double> out, lse, dq;           // (B, Sq, H, D), (B, H, Sq), (B, Sq, H, D)
  std::vector<std::vector<double>> dk, dv;    // per segment (B, Sk, HK, D); zeros without backward
};

/// Fresh random inputs of `c` in `dtype` and their fp64 forward (and, `with_backward`, the
/// gradients for a random dout).
BlockProblem make_problem(const BlockCase& c, DType dtype, int64_t head_dim, float scale, std::mt19937& generator,
                          bool with_backward = true);

/// An fp32 host tensor of `values` in `shape` (the reference's out and lse handed to backward).
HostTensor host_f32(const std::vector<double>& values, std::initializer_list<int64_t> shape);

/// |actual - expected| <= tolerance * (max |expected| + |expected|) + 1e-6 everywhere; -inf at the
/// same places; NaN anywhere (an element never written) fails. Prints the worst element and
/// returns the largest error over max |expected| (for comparing two kernels' errors).
double expect_near_reference(const std::vector<double>& expected, const HostTensor& actual, double tolerance,
                             const std::string& what);

std::vector<double> values_of(const HostTensor& tensor);

}  // namespace spattn::test
