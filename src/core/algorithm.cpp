#include "spattn/algorithm.hpp"

#include "spattn/error.hpp"

namespace spattn {

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> algorithms = {Algorithm::ring,      Algorithm::zigzag,    Algorithm::ulysses,
                                                    Algorithm::hamilton,  Algorithm::hamilton2, Algorithm::allgather,
                                                    Algorithm::usp};
  return algorithms;
}

std::string algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring: return "ring";
    case Algorithm::zigzag: return "zigzag";
    case Algorithm::ulysses: return "ulysses";
    case Algorithm::hamilton: return "hamilton";
    case Algorithm::hamilton2: return "hamilton2";
    case Algorithm::allgather: return "allgather";
    case Algorithm::usp: return "usp";
  }
  return "unknown";
}

Algorithm parse_algorithm(const std::string& name) {
  std::string allowed;
  for (Algorithm algorithm : all_algorithms()) {
    if (algorithm_name(algorithm) == name) return algorithm;
    allowed += (allowed.empty() ? "" : ", ") + algorithm_name(algorithm);
  }
  SPATTN_FAIL("unknown algorithm '" << name << "'; allowed: " << allowed);
}

}  // namespace spattn
