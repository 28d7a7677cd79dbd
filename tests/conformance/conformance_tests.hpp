#pragma once
// The test mode: one GoogleTest test per (target, case), the suite named after the target and the
// test after the case, so that --gtest_filter='cpu.*' picks a target and '*.backward_*' an
// operation ('*.forward_*' every forward variant).

namespace spattn::test {

/// Registers every (target, case) of block_kernel_cases(); call after InitGoogleTest.
void register_conformance_tests();

}  // namespace spattn::test
