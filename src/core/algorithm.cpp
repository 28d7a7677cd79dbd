#include "spattn/algorithm.hpp"

#include "core/name_table.hpp"

namespace spattn {
namespace {

const NameTable<Algorithm>& algorithm_names() {
  static const NameTable<Algorithm> table("algorithm", {{Algorithm::ring, "ring"},
                                                        {Algorithm::zigzag, "zigzag"},
                                                        {Algorithm::stripe, "stripe"},
                                                        {Algorithm::ulysses, "ulysses"},
                                                        {Algorithm::hamilton, "hamilton"},
                                                        {Algorithm::hamilton2, "hamilton2"},
                                                        {Algorithm::allgather, "allgather"},
                                                        {Algorithm::usp, "usp"}});
  return table;
}

}  // namespace

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> algorithms = algorithm_names().values();
  return algorithms;
}

std::string algorithm_name(Algorithm algorithm) { return algorithm_names().name(algorithm); }

Algorithm parse_algorithm(const std::string& name) { return algorithm_names().parse(name); }

std::string documents_unsupported(Algorithm algorithm, const std::vector<int64_t>& document_lengths,
                                  DocumentSplit split) {
  if (document_lengths.empty()) return "";
  if (algorithm == Algorithm::stripe)
    return "packed documents (document_lengths) are taken by ring, zigzag, ulysses, hamilton, hamilton2, allgather "
           "and usp, not by 'stripe' (its ranks hold tokens N apart; zigzag balances documents per document)";
  if (split == DocumentSplit::whole_sequence && algorithm != Algorithm::allgather)
    return "document_split whole_sequence (Llama 3's context parallelism) is all-gather's alone; " +
           algorithm_name(algorithm) + " splits each document on its own: use document_split per_document";
  return "";
}

std::string mask_unsupported(Algorithm algorithm, const AttentionOptions& options) {
  const AttentionMask mask = AttentionMask::from_options(options);
  // No mask (-1, -1) or the causal one (-1, 0): the two that mean the same in stripe's positions.
  if (algorithm != Algorithm::stripe || (mask.left < 0 && mask.right <= 0)) return "";
  return "stripe takes a causal mask or none, not a sliding window (window_left " +
         std::to_string(options.window_left) + ", window_right " + std::to_string(options.window_right) +
         "): its ranks hold tokens N apart; use ring, zigzag or hamilton for a window";
}

}  // namespace spattn
