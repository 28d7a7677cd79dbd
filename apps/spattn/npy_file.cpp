#include "npy_file.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>

#include "core/dtype_conversion.hpp"
#include "spattn/error.hpp"

namespace spattn::app {
namespace {

// The format is specified in numpy/lib/format.py (NEP 1); every number in it is little-endian,
// as are the hosts spattn runs on, so payloads are copied without byte swapping.
constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::size_t kVersion1PreambleSize = 10;  // magic, major, minor, uint16 header length
constexpr std::size_t kVersion2PreambleSize = 12;  // magic, major, minor, uint32 header length
constexpr std::size_t kDataAlignment = 64;
// NumPy 1.x caps arrays at 32 dimensions; no .npy file that spattn meets has more.
constexpr std::size_t kMaxDimensions = 32;
constexpr char kAllowedDtypes[] = "'<f4' (float32) or '<f2' (float16), little-endian";
constexpr char kExpectedHeader[] =
    "a dict like {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

[[noreturn]] void fail_reading(const std::string& path, const std::string& problem) {
  SPATTN_FAIL("cannot read '" << path << "': " << problem);
}

// Bytes from arbitrary files: messages show them escaped and cut short.
std::string printable_excerpt(std::string_view text) {
  constexpr std::size_t kMaxShown = 60;
  const std::string_view shown = text.substr(0, kMaxShown);
  std::ostringstream excerpt;
  for (const char character : shown) {
    const auto byte = static_cast<unsigned char>(character);
    if (byte == '\n') {
      excerpt << "\\n";
    } else if (byte >= 0x20 && byte < 0x7f) {
      excerpt << character;
    } else {
      constexpr char kHexDigits[] = "0123456789abcdef";
      excerpt << "\\x" << kHexDigits[byte >> 4] << kHexDigits[byte & 0xf];
    }
  }
  if (shown.size() < text.size()) excerpt << "...";
  return excerpt.str();
}

// Number of elements of `shape`, or nothing when it does not fit in int64_t.
std::optional<int64_t> count_elements(const std::vector<int64_t>& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t count = 1;
  for (const int64_t size : shape) {
    if (count > std::numeric_limits<int64_t>::max() / size) return std::nullopt;
    count *= size;
  }
  return count;
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Parses the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Only the literals NumPy writes are accepted: strings, True/False and tuples of integers.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader header;
    bool seen_descr = false, seen_fortran_order = false, seen_shape = false;
    expect('{');
    while (!consume('}')) {
      const std::size_t key_position = position_;
      const std::string key = parse_string("a key");
      expect(':');
      if (key == "descr") {
        mark_seen(seen_descr, key, key_position);
        header.descr = parse_string("the 'descr' value");
      } else if (key == "fortran_order") {
        mark_seen(seen_fortran_order, key, key_position);
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark_seen(seen_shape, key, key_position);
        header.shape = parse_shape();
      } else {
        fail_at(key_position, "has the unknown key '" + key + "'; allowed: 'descr', 'fortran_order', 'shape'");
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_whitespace();
    if (position_ != text_.size()) fail_at(position_, "continues after the closing '}'");
    if (!seen_descr) fail_at(0, "has no 'descr' key");
    if (!seen_fortran_order) fail_at(0, "has no 'fortran_order' key");
    if (!seen_shape) fail_at(0, "has no 'shape' key");
    return header;
  }

 private:
  [[noreturn]] void fail_at(std::size_t position, const std::string& problem) const {
    // The padding that ends every header would only push the useful bytes out of the excerpt.
    const std::string_view unpadded = std::string_view(text_).substr(0, text_.find_last_not_of(" \n") + 1);
    const std::string_view rest = unpadded.substr(std::min(position, unpadded.size()));
    fail_reading(path_, "the header " + problem + " at \"" + printable_excerpt(rest) + "\"; expected " +
                            kExpectedHeader);
  }

  void mark_seen(bool& seen, const std::string& key, std::size_t key_position) const {
    if (seen) fail_at(key_position, "repeats the key '" + key + "'");
    seen = true;
  }

  static bool is_whitespace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

  void skip_whitespace() {
    while (position_ < text_.size() && is_whitespace(text_[position_])) ++position_;
  }

  bool consume(char expected) {
    skip_whitespace();
    if (position_ < text_.size() && text_[position_] == expected) {
      ++position_;
      return true;
    }
    return false;
  }

  void expect(char expected) {
    if (!consume(expected)) fail_at(position_, std::string("lacks '") + expected + "'");
  }

  std::string parse_string(const char* what) {
    skip_whitespace();
    const std::size_t start = position_;
    if (position_ >= text_.size() || (text_[position_] != '\'' && text_[position_] != '"')) {
      fail_at(start, std::string("lacks ") + what + " in quotes");
    }
    const char quote = text_[position_++];
    const std::size_t closing = text_.find(quote, position_);
    if (closing == std::string::npos) fail_at(start, "has an unterminated string");
    std::string value = text_.substr(position_, closing - position_);
    position_ = closing + 1;
    return value;
  }

  bool consume_word(const std::string& word) {
    if (text_.compare(position_, word.size(), word) != 0) return false;
    position_ += word.size();
    return true;
  }

  bool parse_bool() {
    skip_whitespace();
    if (consume_word("True")) return true;
    if (consume_word("False")) return false;
    fail_at(position_, "has a 'fortran_order' value that is neither True nor False");
  }

  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    skip_whitespace();
    const std::size_t start = position_;
    if (!consume('(')) fail_at(start, "has a 'shape' that is not a tuple of integers");
    while (!consume(')')) {
      if (shape.size() == kMaxDimensions) {
        fail_at(start, "has a 'shape' of more than " + std::to_string(kMaxDimensions) + " dimensions");
      }
      shape.push_back(parse_dimension());
      if (consume(',')) continue;
      if (!consume(')')) fail_at(start, "has a 'shape' that is not a tuple of integers");
      // A one-element tuple needs its comma, "(5,)"; "(5)" is just the integer 5 in Python.
      if (shape.size() == 1) fail_at(start, "has a 'shape' of one dimension without the tuple's comma");
      break;
    }
    return shape;
  }

  int64_t parse_dimension() {
    skip_whitespace();
    const std::size_t start = position_;
    if (position_ < text_.size() && text_[position_] == '-') {
      fail_at(start, "has a negative dimension in 'shape'; sizes must be >= 0");
    }
    int64_t size = 0;
    const char* begin = text_.data() + position_;
    const char* end = text_.data() + text_.size();
    const auto [stop, error] = std::from_chars(begin, end, size);
    if (error == std::errc::result_out_of_range) {
      fail_at(start, "has a dimension in 'shape' that does not fit in 64 bits");
    }
    if (error != std::errc() || stop == begin) fail_at(start, "has a 'shape' entry that is not an integer");
    position_ += static_cast<std::size_t>(stop - begin);
    return size;
  }

  const std::string& text_;
  const std::string& path_;
  std::size_t position_ = 0;
};

// Reads exactly `size` bytes at `offset`; the caller has checked that the stream holds them.
void read_exactly(std::istream& stream, const std::string& name, std::size_t offset, void* destination,
                  std::size_t size) {
  stream.seekg(static_cast<std::streamoff>(offset));
  stream.read(static_cast<char*>(destination), static_cast<std::streamsize>(size));
  if (!stream || static_cast<std::size_t>(stream.gcount()) != size) {
    fail_reading(name, "the file ended or failed while reading " + std::to_string(size) +
                           " bytes at offset " + std::to_string(offset));
  }
}

// The stream's length in bytes, from its end; every size in the file is checked against it
// before anything is allocated.
std::size_t stream_size(std::istream& stream, const std::string& name) {
  stream.seekg(0, std::ios::end);
  const std::streamoff end = stream.tellg();
  if (!stream || end < 0) fail_reading(name, "cannot find the end of the file (not seekable?)");
  return static_cast<std::size_t>(end);
}

uint32_t read_little_endian(const unsigned char* bytes, std::size_t count) {
  uint32_t value = 0;
  for (std::size_t i = count; i-- > 0;) value = (value << 8) | bytes[i];
  return value;
}

DType dtype_of_descr(const std::string& descr, const std::string& path) {
  // '|' (byte order not applicable) and '=' (native) both mean little-endian on our hosts.
  const bool little_endian = !descr.empty() && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=');
  const std::string type_code = descr.size() == 3 && little_endian ? descr.substr(1) : "";
  if (type_code == "f4") return DType::f32;
  if (type_code == "f2") return DType::f16;
  if (descr.size() == 3 && descr[0] == '>' && (descr.substr(1) == "f4" || descr.substr(1) == "f2")) {
    fail_reading(path, "dtype '" + descr + "' is big-endian; allowed: " + kAllowedDtypes +
                           " (convert with array.astype('<" + descr.substr(1) + "'))");
  }
  fail_reading(path, "dtype '" + printable_excerpt(descr) + "' is not supported; allowed: " + kAllowedDtypes);
}

}  // namespace

std::string format_shape(const std::vector<int64_t>& shape) {
  std::ostringstream text;
  text << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) text << (i > 0 ? ", " : "") << shape[i];
  text << (shape.size() == 1 ? ",)" : ")");
  return text.str();
}

NpyArray read_npy(const std::string& path) {
  std::error_code status_error;
  const auto status = std::filesystem::status(path, status_error);
  if (!std::filesystem::exists(status)) fail_reading(path, "no such file");
  if (!std::filesystem::is_regular_file(status)) fail_reading(path, "not a regular file");
  std::ifstream file(path, std::ios::binary);
  if (!file) fail_reading(path, std::strerror(errno));
  return read_npy(file, path);
}

NpyArray read_npy(std::istream& stream, const std::string& name) {
  const std::size_t file_size = stream_size(stream, name);
  unsigned char preamble[kVersion2PreambleSize] = {};
  read_exactly(stream, name, 0, preamble, std::min(file_size, sizeof preamble));
  if (file_size < kMagicSize || std::memcmp(preamble, kMagic, kMagicSize) != 0) {
    fail_reading(name, "not a .npy file: it does not start with the magic string \"\\x93NUMPY\"");
  }
  if (file_size < kVersion1PreambleSize) {
    fail_reading(name, "the file is " + std::to_string(file_size) + " bytes, too short for a .npy preamble");
  }
  const int major = preamble[6], minor = preamble[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    fail_reading(name, "unsupported .npy format version " + std::to_string(major) + "." +
                           std::to_string(minor) + "; allowed: 1.0, 2.0, 3.0");
  }
  // Version 1.0 stores the header length in 16 bits; 2.0 and 3.0 (UTF-8 header) in 32 bits.
  const std::size_t preamble_size = major == 1 ? kVersion1PreambleSize : kVersion2PreambleSize;
  if (file_size < preamble_size) {
    fail_reading(name, "the file is " + std::to_string(file_size) + " bytes, too short for a version " +
                           std::to_string(major) + ".0 preamble of " + std::to_string(preamble_size) + " bytes");
  }
  const std::size_t header_size = read_little_endian(preamble + 8, preamble_size - 8);
  if (header_size > file_size - preamble_size) {
    fail_reading(name, "the header length " + std::to_string(header_size) + " goes beyond the end of the file (" +
                           std::to_string(file_size) + " bytes)");
  }
  std::string header_text(header_size, '\0');
  read_exactly(stream, name, preamble_size, header_text.data(), header_size);
  const NpyHeader header = NpyHeaderParser(header_text, name).parse();

  NpyArray array;
  array.stored_dtype = dtype_of_descr(header.descr, name);
  if (header.fortran_order) {
    fail_reading(name, "fortran_order is True; only C order is allowed (save np.ascontiguousarray(array))");
  }
  array.shape = header.shape;
  const std::optional<int64_t> element_count = count_elements(header.shape);
  if (!element_count) {
    fail_reading(name, "shape " + format_shape(header.shape) + " has more elements than fit in 64 bits");
  }

  const std::size_t data_offset = preamble_size + header_size;
  const std::size_t data_size = file_size - data_offset;
  const std::size_t element_size = dtype_size(array.stored_dtype);
  const auto elements = static_cast<std::size_t>(*element_count);
  // Compared as counts of elements so that an absurd shape cannot overflow a byte count.
  if (data_size / element_size != elements || data_size % element_size != 0) {
    const bool too_short = data_size / element_size < elements;
    fail_reading(name, std::string("the data is ") + (too_short ? "shorter" : "longer") + " than shape " +
                           format_shape(header.shape) + " says: it needs " + std::to_string(elements) + " " +
                           (array.stored_dtype == DType::f32 ? "float32" : "float16") + " values of " +
                           std::to_string(element_size) + " bytes each, but " + std::to_string(data_size) +
                           " bytes follow the header");
  }

  array.values.resize(elements);
  if (array.stored_dtype == DType::f32) {
    read_exactly(stream, name, data_offset, array.values.data(), data_size);
  } else {
    std::vector<uint16_t> halves(elements);
    read_exactly(stream, name, data_offset, halves.data(), data_size);
    std::transform(halves.begin(), halves.end(), array.values.begin(), fp16_to_float);
  }
  return array;
}

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  SPATTN_CHECK(shape.size() <= kMaxDimensions, "cannot write '" << path << "': shape " << format_shape(shape)
                                                                 << " has more than " << kMaxDimensions
                                                                 << " dimensions");
  SPATTN_CHECK(std::none_of(shape.begin(), shape.end(), [](int64_t size) { return size < 0; }),
               "cannot write '" << path << "': shape " << format_shape(shape) << " has a negative size; sizes must be >= 0");
  const std::optional<int64_t> element_count = count_elements(shape);
  SPATTN_CHECK(element_count, "cannot write '" << path << "': shape " << format_shape(shape)
                                               << " has more elements than fit in 64 bits");
  SPATTN_CHECK(data != nullptr || *element_count == 0,
               "cannot write '" << path << "': data is null for shape " << format_shape(shape));

  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + format_shape(shape) + ", }";
  // Pad with spaces and end with '\n' so that the data starts at a multiple of 64 bytes.
  const std::size_t unpadded_size = kVersion1PreambleSize + header.size() + 1;
  const std::size_t padded_size = (unpadded_size + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  header.append(padded_size - unpadded_size, ' ');
  header.push_back('\n');
  const auto header_size = static_cast<uint16_t>(header.size());
  const char header_size_bytes[2] = {static_cast<char>(header_size & 0xff), static_cast<char>(header_size >> 8)};
  const char version[2] = {1, 0};

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  SPATTN_CHECK(file, "cannot write '" << path << "': " << std::strerror(errno));
  file.write(kMagic, kMagicSize);
  file.write(version, sizeof version);
  file.write(header_size_bytes, sizeof header_size_bytes);
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  file.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(*element_count * sizeof(float)));
  file.close();
  SPATTN_CHECK(file, "cannot write '" << path << "': writing failed (disk full?)");
}

void expect_shape(const NpyArray& array, const std::vector<int64_t>& expected, const std::string& name,
                  const std::string& dimension_names) {
  SPATTN_CHECK(array.shape == expected, name << " has shape " << format_shape(array.shape) << "; expected "
                                             << format_shape(expected)
                                             << (dimension_names.empty() ? "" : " (" + dimension_names + ")"));
}

}  // namespace spattn::app
