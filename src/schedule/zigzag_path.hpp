#pragma once
// The zig-zag Hamiltonian path on Z_m, the building block of every cycle construction in
// hamilton.md: Walecki's cycles, the closed form for K*_n, and the node paths of the two-level
// scheme.

#include <vector>

namespace spattn {

/// (start, start+1, start-1, start+2, start-2, ..., start+m/2) mod m: element t is
/// start + ceil(t/2) for odd t and start - t/2 for even t. Its steps are +1, -2, +3, -4, ...,
/// i.e. every nonzero difference mod m once when m is even, so the m translates (start =
/// 0..m-1) partition the arcs of K*_m into Hamiltonian paths, and translate start + m/2 is the
/// reverse of translate start.
inline std::vector<int> zigzag_path(int modulus, int start) {
  std::vector<int> path(static_cast<std::size_t>(modulus));
  for (int t = 0; t < modulus; ++t) {
    const int offset = t % 2 == 1 ? (t + 1) / 2 : modulus - t / 2;
    path[static_cast<std::size_t>(t)] = (start + offset) % modulus;
  }
  return path;
}

}  // namespace spattn
