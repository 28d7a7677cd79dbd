#pragma once
/// \file algorithm.hpp
/// Which strategy a plan runs, and the degrees that only some strategies read.

#include <cstdint>
#include <string>
#include <vector>

#include "spattn/attention_options.hpp"

namespace spattn {

enum class Algorithm {
  ring,       ///< ring attention: keys and values pass around a ring, contiguous shards
  zigzag,     ///< ring attention over the zigzag layout: equal work per rank under a causal mask
  stripe,     ///< ring attention over the stripe layout (striped attention): equal work per rank and step
  ulysses,    ///< all-to-all from sequence shards to head shards, local attention, and back
  hamilton,   ///< Hamiltonian-cycle attention (TASP): n-1 cycles keep every link busy
  hamilton2,  ///< two-level Hamiltonian cycles for nodes of m ranks (StrategyOptions::nodes)
  allgather,  ///< all-gather keys and values, attend once (Llama 3 style)
  usp,        ///< Ulysses inside groups x zigzag ring across groups (StrategyOptions::inner)
};

/// Every algorithm, in the order help texts list them.
const std::vector<Algorithm>& all_algorithms();
/// "ring", "zigzag", "stripe", "ulysses", "hamilton", "hamilton2", "allgather" or "usp".
std::string algorithm_name(Algorithm algorithm);
/// Throws Error naming the allowed names.
Algorithm parse_algorithm(const std::string& name);

/// "" when `algorithm` takes the packed documents of `document_lengths`
/// (AttentionOptions::document_lengths; none: every algorithm) split by `split`, else why: every
/// strategy but stripe takes them, each document split on its own (usp: over its groups, then
/// within each group: give it StrategyOptions::inner); all-gather alone also splits the whole
/// sequence. Plans refuse what it refuses, on every rank before any transfer.
std::string documents_unsupported(Algorithm algorithm, const std::vector<int64_t>& document_lengths,
                                  DocumentSplit split = DocumentSplit::per_document);

/// "" when `algorithm` takes the mask of `options`, else why: stripe takes a causal mask or none,
/// no sliding window (its layout's positions are N apart: SequenceLayout::mask_position). Plans,
/// the cost model and `spattn plan` refuse what it refuses.
std::string mask_unsupported(Algorithm algorithm, const AttentionOptions& options);

/// Parameters only some strategies read.
struct StrategyOptions {
  int nodes = 1;  ///< hamilton2: nodes u; ranks per node m = N / u
  int inner = 0;  ///< usp: Ulysses degree N1 (ranks per group); 0 chooses the largest that fits (with
                  ///< packed documents plan_document_layout needs it given: it knows no head counts)
  Algorithm across = Algorithm::zigzag;  ///< usp: ring, zigzag or hamilton across the groups
};

}  // namespace spattn
