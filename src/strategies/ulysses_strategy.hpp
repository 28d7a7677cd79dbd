#pragma once
// The Ulysses strategy that plain Ulysses and USP share (ulysses_strategy.cpp); their factories,
// which validate and agree on the call, are make_ulysses_strategy and make_usp_strategy
// (strategy.hpp).

#include <memory>
#include <optional>
#include <vector>

#include "spattn/communicator.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/sequence_layout.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/strategy.hpp"

namespace spattn {

// Whom a Ulysses strategy talks to and how it attends its head shards. Plain Ulysses trades heads
// for tokens over every rank and attends the whole sequence with the block kernels (all members
// null). USP trades them inside a group and attends the group's tokens with a rotation (ring,
// zigzag or hamilton) across the groups.
struct AcrossGroups {
  std::unique_ptr<Communicator> group;          // the ranks that trade heads for tokens
  std::unique_ptr<Communicator> across_groups;  // the ranks of this member index in every group
  std::unique_ptr<Strategy> inner;              // attention over across_groups
};

/// The Ulysses strategy over `world`, whose ranks agreed on the call (its `signature`) already:
/// trading heads for tokens within `across.group` (every rank of `world` when it is null) and
/// attending with `across.inner` (the block kernels when it is null); `layout` is the global
/// sequence's layout over `world`, the layout of `documents` when the call packs documents (the
/// block kernels then attend each document's parts to each other only).
std::unique_ptr<Strategy> make_agreed_ulysses_strategy(Communicator& world, AcrossGroups across, SequenceLayout layout,
                                                       const std::optional<DocumentLayout>& documents,
                                                       std::vector<CallField> signature, const AttentionShape& shape,
                                                       const AttentionOptions& options);

}  // namespace spattn
