#include "spattn/algorithm.hpp"

#include "core/name_table.hpp"

namespace spattn {
namespace {

const NameTable<Algorithm>& algorithm_names() {
  static const NameTable<Algorithm> table("algorithm", {{Algorithm::ring, "ring"},
                                                        {Algorithm::zigzag, "zigzag"},
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
  if (algorithm == Algorithm::usp)
    return "packed documents (document_lengths) are taken by ring, zigzag, ulysses, hamilton, hamilton2 and "
           "allgather so far, not by 'usp'";
  if (split == DocumentSplit::whole_sequence && algorithm != Algorithm::allgather)
    return "document_split whole_sequence (Llama 3's context parallelism) is all-gather's alone; " +
           algorithm_name(algorithm) + " splits each document on its own: use document_split per_document";
  return "";
}

}  // namespace spattn
