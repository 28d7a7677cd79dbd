// libFuzzer target for the .npy reader (apps/spattn/npy_file.cpp), which reads files a user
// hands to `spattn run --inputs`: any bytes must give an array or a spattn::Error, never a
// crash, a hang, undefined behaviour, a leak or an allocation beyond the file's own size.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "npy_file.hpp"
#include "spattn/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::istringstream stream(std::string(reinterpret_cast<const char*>(data), size), std::ios::binary);
  try {
    const spattn::app::NpyArray array = spattn::app::read_npy(stream, "fuzz.npy");
    // An array that was read holds exactly the elements its shape says, and they came from the
    // input: never more than the bytes given.
    // (Unsigned, whose wrapping is defined: a shape with a 0 may multiply past 64 bits before it.)
    uint64_t elements = 1;
    for (const int64_t extent : array.shape) elements *= static_cast<uint64_t>(extent);
    const bool empty = std::find(array.shape.begin(), array.shape.end(), 0) != array.shape.end();
    if ((empty ? 0 : elements) != array.values.size() || array.values.size() * 2 > size) std::abort();
  } catch (const spattn::Error&) {
    // The expected outcome for most inputs: a clear message, checked by the unit tests.
  }
  return 0;
}
