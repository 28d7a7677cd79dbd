// The rules of schedule/strategy_rules.hpp on their own: the rotations' layouts, slots and
// cycles, and the message for each kind of case a strategy refuses. That constructing a plan and
// the cost model refuse exactly these cases with these words is
// tests/distributed/planner_agreement_test.cpp's.

#include "schedule/strategy_rules.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "schedule/ulysses_degree.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

const AttentionShape kShape{1, 96, 8, 4, 16, DType::f32};

TEST(StrategyRules, RotationFormsAndCycles) {
  EXPECT_EQ(rotation_form(Algorithm::ring, 5, true, 1).layout, LayoutKind::contiguous);
  EXPECT_EQ(rotation_form(Algorithm::zigzag, 5, false, 1).layout, LayoutKind::zigzag);
  // Hamiltonian schemes balance causal work over the zigzag layout, one slot per cycle.
  EXPECT_EQ(rotation_form(Algorithm::hamilton, 5, true, 1).layout, LayoutKind::zigzag);
  EXPECT_EQ(rotation_form(Algorithm::hamilton, 5, false, 1).layout, LayoutKind::contiguous);
  EXPECT_EQ(rotation_form(Algorithm::hamilton, 5, false, 1).slots, 4);
  EXPECT_EQ(rotation_form(Algorithm::hamilton, 1, false, 1).slots, 1);
  EXPECT_EQ(rotation_form(Algorithm::hamilton2, 8, true, 2).slots, 4);

  EXPECT_EQ(rotation_cycles(Algorithm::ring, 5, 1), ring_cycles(5));
  EXPECT_EQ(rotation_cycles(Algorithm::zigzag, 5, 1), ring_cycles(5));
  EXPECT_EQ(rotation_cycles(Algorithm::hamilton, 8, 1), hamiltonian_decomposition(8));
  EXPECT_EQ(rotation_cycles(Algorithm::hamilton, 1, 1), ring_cycles(1));
  EXPECT_EQ(rotation_cycles(Algorithm::hamilton2, 8, 2), two_level_cycles(4, 2));
  EXPECT_THROW(rotation_cycles(Algorithm::hamilton, 6, 1), Error);
  try {
    rotation_form(Algorithm::ulysses, 8, false, 1);
    ADD_FAILURE() << "ulysses has no rotation form";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("'ulysses' does not rotate along cycles"));
  }
}

TEST(StrategyRules, EachRefusalSaysWhy) {
  StrategyOptions options;
  EXPECT_EQ(strategy_error(Algorithm::zigzag, kShape, 4, true, options), "");
  EXPECT_THAT(strategy_error(Algorithm::zigzag, kShape, 5, true, options),
              HasSubstr("sequence length 96 cannot be split over 5 ranks in the zigzag layout"));
  EXPECT_THAT(strategy_error(Algorithm::hamilton, kShape, 4, false, options),
              HasSubstr("no decomposition of the complete directed graph on 4 ranks"));
  EXPECT_THAT(strategy_error(Algorithm::hamilton, {1, 105, 8, 4, 16, DType::f32}, 5, false, options),
              HasSubstr("cannot be cut into 4 slots per chunk over 5 ranks"));
  options.nodes = 2;
  EXPECT_THAT(strategy_error(Algorithm::hamilton2, kShape, 3, true, options),
              HasSubstr("hamilton2 needs the ranks (3) to be a multiple of the nodes (2)"));
  EXPECT_THAT(strategy_error(Algorithm::ulysses, kShape, 3, false, options),
              HasSubstr("heads (8) must be divisible by ranks (3)"));
  EXPECT_THAT(strategy_error(Algorithm::allgather, {1, 30, 8, 4, 16, DType::f32}, 4, false, options),
              HasSubstr("in the zigzag layout"));
  options.inner = 3;
  EXPECT_EQ(strategy_error(Algorithm::usp, kShape, 6, false, options), ulysses_degree_error(6, 3, kShape));
  options.inner = 2;
  options.across = Algorithm::ulysses;
  EXPECT_THAT(strategy_error(Algorithm::usp, kShape, 4, false, options),
              HasSubstr("usp runs ring, zigzag or hamilton across its groups, not 'ulysses'"));
  options.across = Algorithm::hamilton;
  EXPECT_THAT(strategy_error(Algorithm::usp, {1, 96, 8, 8, 16, DType::f32}, 8, false, options),
              HasSubstr("across the 4 groups of usp, hamilton: no decomposition"));
}

}  // namespace
}  // namespace spattn
