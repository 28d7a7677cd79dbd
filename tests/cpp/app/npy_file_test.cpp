#include "npy_file.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include "spattn/error.hpp"

namespace spattn::app {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Every test gets its own folder, so that ctest may run them in parallel.
class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = std::filesystem::temp_directory_path() /
              ("spattn_npy_" + std::to_string(::getpid()) + "_" + test->name());
    std::filesystem::remove_all(folder_);
    std::filesystem::create_directories(folder_);
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  std::string path(const std::string& name) const { return (folder_ / name).string(); }

  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    const std::string file_path = path(name);
    std::ofstream file(file_path, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file_path;
  }

  std::string read_bytes(const std::string& file_path) const {
    std::ifstream file(file_path, std::ios::binary);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  }

  // The error message that read_npy gives for `bytes`, or "" when it reads them.
  std::string read_error(const std::string& bytes) const {
    const std::string file_path = write_bytes("case.npy", bytes);
    try {
      read_npy(file_path);
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr(file_path));
      return error.what();
    }
    return "";
  }

  std::filesystem::path folder_;
};

std::string little_endian(uint32_t value, int bytes) {
  std::string encoded;
  for (int i = 0; i < bytes; ++i) encoded.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return encoded;
}

// A .npy file as NumPy lays it out: preamble, header padded to 64 bytes and ended by '\n', data.
std::string npy_bytes(const std::string& header_dict, const std::string& data, int major_version = 1) {
  const std::size_t preamble_size = major_version == 1 ? 10 : 12;
  std::string header = header_dict;
  while ((preamble_size + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  return std::string("\x93NUMPY", 6) + static_cast<char>(major_version) + '\0' +
         little_endian(static_cast<uint32_t>(header.size()), major_version == 1 ? 2 : 4) + header + data;
}

std::string float_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran_order = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran_order + ", 'shape': " + shape + ", }";
}

std::vector<float> ramp(std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i) * 0.37f - 3.0f;
  return values;
}

void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), expected.size() * sizeof(float)), 0);
}

TEST_F(NpyFileTest, RoundTripsRanksOneToFour) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {2, 3}, {2, 3, 4}, {2, 3, 4, 5}};
  for (const auto& shape : shapes) {
    std::size_t count = 1;
    for (const int64_t size : shape) count *= static_cast<std::size_t>(size);
    std::vector<float> values = ramp(count);
    values.front() = std::numeric_limits<float>::denorm_min();
    values.back() = -std::numeric_limits<float>::infinity();
    write_npy(path("array.npy"), values.data(), shape);
    const NpyArray array = read_npy(path("array.npy"));
    EXPECT_EQ(array.shape, shape);
    EXPECT_EQ(array.stored_dtype, DType::f32);
    expect_same_bits(array.values, values);
  }
}

TEST_F(NpyFileTest, RoundTripsScalarAndEmptyArrays) {
  const float scalar = 2.5f;
  write_npy(path("scalar.npy"), &scalar, {});
  const NpyArray read_scalar = read_npy(path("scalar.npy"));
  EXPECT_TRUE(read_scalar.shape.empty());
  EXPECT_EQ(read_scalar.values, std::vector<float>{2.5f});

  write_npy(path("empty.npy"), nullptr, {0, 3});
  const NpyArray empty = read_npy(path("empty.npy"));
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty.numel(), 0);
}

TEST_F(NpyFileTest, WritesTheLayoutNumpyWrites) {
  const std::vector<float> values = ramp(6);
  write_npy(path("array.npy"), values.data(), {2, 3});
  const std::string bytes = read_bytes(path("array.npy"));
  EXPECT_EQ(bytes, npy_bytes(dict("<f4", "(2, 3)"), float_bytes(values)));
  EXPECT_EQ((bytes.size() - values.size() * sizeof(float)) % 64, 0u);
  EXPECT_EQ(bytes[bytes.size() - values.size() * sizeof(float) - 1], '\n');

  write_npy(path("vector.npy"), values.data(), {6});
  EXPECT_THAT(read_bytes(path("vector.npy")), HasSubstr("'shape': (6,), }"));
}

TEST_F(NpyFileTest, ReadsFloat16) {
  // 1, -2, 0.5, 65504 (largest half), 2^-24 (smallest subnormal half), +inf.
  const std::vector<uint16_t> halves = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x7c00};
  const std::string data(reinterpret_cast<const char*>(halves.data()), halves.size() * 2);
  const std::string file_path = write_bytes("half.npy", npy_bytes(dict("<f2", "(2, 3)"), data));
  const NpyArray array = read_npy(file_path);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(array.stored_dtype, DType::f16);
  const std::vector<float> expected = {1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24),
                                       std::numeric_limits<float>::infinity()};
  expect_same_bits(array.values, expected);
}

TEST_F(NpyFileTest, AcceptsByteOrderEquivalentsOfLittleEndian) {
  const std::vector<float> values = ramp(4);
  for (const char* descr : {"|f4", "=f4"}) {
    const NpyArray array = read_npy(write_bytes("array.npy", npy_bytes(dict(descr, "(4,)"), float_bytes(values))));
    expect_same_bits(array.values, values);
  }
  const std::string one_half("\x00\x3c", 2);
  EXPECT_EQ(read_npy(write_bytes("half.npy", npy_bytes(dict("=f2", "(1,)"), one_half))).values,
            std::vector<float>{1.0f});
}

TEST_F(NpyFileTest, ReadsVersionTwoAndThreeHeaders) {
  const std::vector<float> values = ramp(6);
  for (const int major_version : {2, 3}) {
    const std::string bytes = npy_bytes(dict("<f4", "(3, 2)"), float_bytes(values), major_version);
    const NpyArray array = read_npy(write_bytes("array.npy", bytes));
    EXPECT_EQ(array.shape, (std::vector<int64_t>{3, 2}));
    expect_same_bits(array.values, values);
  }
}

TEST_F(NpyFileTest, ReadsAnyLayoutOfTheHeaderDict) {
  const std::vector<float> values = ramp(2);
  const std::string data = float_bytes(values);
  for (const char* header : {"{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}",
                             "{'descr':'<f4','fortran_order':False,'shape':(2,)}",
                             "{ 'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 2 , ) , }",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2,)}"}) {
    SCOPED_TRACE(header);
    expect_same_bits(read_npy(write_bytes("array.npy", npy_bytes(header, data))).values, values);
  }
}

TEST_F(NpyFileTest, MissingFileNamesThePath) {
  EXPECT_THAT([&] { read_npy(path("absent.npy")); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr(path("absent.npy")), HasSubstr("no such file"))));
  EXPECT_THAT([&] { read_npy(folder_.string()); }, ::testing::ThrowsMessage<Error>(HasSubstr("not a regular file")));
}

TEST_F(NpyFileTest, RejectsBadMagicAndVersions) {
  const std::string valid = npy_bytes(dict("<f4", "(1,)"), float_bytes({1.0f}));
  EXPECT_THAT(read_error("PK\x03\x04 this is a zip file"), HasSubstr("does not start with the magic"));
  EXPECT_THAT(read_error(""), HasSubstr("magic"));
  std::string version_four = valid;
  version_four[6] = 4;
  EXPECT_THAT(read_error(version_four), AllOf(HasSubstr("version 4.0"), HasSubstr("allowed: 1.0, 2.0, 3.0")));
  std::string version_one_one = valid;
  version_one_one[7] = 1;
  EXPECT_THAT(read_error(version_one_one), HasSubstr("version 1.1"));
}

TEST_F(NpyFileTest, RejectsHeadersThatAreNotTheExpectedDict) {
  const std::string data = float_bytes({1.0f});
  const auto header_error = [&](const std::string& header) { return read_error(npy_bytes(header, data)); };
  EXPECT_THAT(header_error("[1, 2]"), AllOf(HasSubstr("lacks '{'"), HasSubstr("expected a dict")));
  EXPECT_THAT(header_error("{'fortran_order': False, 'shape': (1,), }"), HasSubstr("no 'descr' key"));
  EXPECT_THAT(header_error("{'descr': '<f4', 'shape': (1,), }"), HasSubstr("no 'fortran_order' key"));
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': False, }"), HasSubstr("no 'shape' key"));
  EXPECT_THAT(header_error(dict("<f4", "(1,)").insert(1, "'order': 'C', ")),
              AllOf(HasSubstr("unknown key 'order'"), HasSubstr("allowed: 'descr', 'fortran_order', 'shape'")));
  EXPECT_THAT(header_error(dict("<f4", "(1,)").insert(1, "'descr': '<f4', ")), HasSubstr("repeats the key 'descr'"));
  EXPECT_THAT(header_error(dict("<f4", "(1,)") + " x"), HasSubstr("continues after the closing '}'"));
  EXPECT_THAT(header_error("{'descr: '<f4'}"), HasSubstr("lacks ':'"));
  EXPECT_THAT(header_error("{'descr"), HasSubstr("unterminated string"));
  EXPECT_THAT(header_error("{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}"),
              HasSubstr("neither True nor False"));
  EXPECT_THAT(header_error("{'descr': <f4, 'fortran_order': False, 'shape': (1,)}"),
              HasSubstr("lacks the 'descr' value in quotes"));
  EXPECT_THAT(header_error(""), HasSubstr("lacks '{'"));
}

TEST_F(NpyFileTest, RejectsFortranOrder) {
  EXPECT_THAT(read_error(npy_bytes(dict("<f4", "(1,)", "True"), float_bytes({1.0f}))),
              AllOf(HasSubstr("fortran_order is True"), HasSubstr("only C order")));
}

TEST_F(NpyFileTest, RejectsOtherDtypesNamingThem) {
  const std::string eight_bytes(8, '\0');
  for (const char* descr : {"<f8", "<i4", "|u1", "<c8", "f4", "<f4 "}) {
    SCOPED_TRACE(descr);
    EXPECT_THAT(read_error(npy_bytes(dict(descr, "(1,)"), eight_bytes)),
                AllOf(HasSubstr(std::string("'") + descr + "' is not supported"), HasSubstr("float32"),
                      HasSubstr("float16")));
  }
  EXPECT_THAT(read_error(npy_bytes(dict("\x01\xff", "(1,)"), eight_bytes)), HasSubstr("'\\x01\\xff'"));
  EXPECT_THAT(read_error(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", eight_bytes)),
              HasSubstr("'descr' value in quotes"));
}

TEST_F(NpyFileTest, RejectsBigEndian) {
  EXPECT_THAT(read_error(npy_bytes(dict(">f4", "(1,)"), float_bytes({1.0f}))),
              AllOf(HasSubstr("'>f4' is big-endian"), HasSubstr("'<f4'")));
  EXPECT_THAT(read_error(npy_bytes(dict(">f2", "(2,)"), float_bytes({1.0f}))), HasSubstr("big-endian"));
}

TEST_F(NpyFileTest, RejectsNegativeOrAbsurdShapes) {
  const std::string data = float_bytes({1.0f});
  const auto shape_error = [&](const std::string& shape) { return read_error(npy_bytes(dict("<f4", shape), data)); };
  EXPECT_THAT(shape_error("(-1, 3)"), HasSubstr("negative dimension"));
  EXPECT_THAT(shape_error("(99999999999999999999,)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(shape_error("(4294967296, 4294967296, 4294967296)"), HasSubstr("more elements than fit in 64 bits"));
  EXPECT_THAT(shape_error("(1000000000000000000,)"), HasSubstr("shorter than shape (1000000000000000000,)"));
  std::string thirty_three_ones;
  for (int i = 0; i < 33; ++i) thirty_three_ones += "1, ";
  EXPECT_THAT(shape_error("(" + thirty_three_ones + ")"), HasSubstr("more than 32 dimensions"));
  EXPECT_THAT(shape_error("[1]"), HasSubstr("not a tuple"));
  EXPECT_THAT(shape_error("(1)"), HasSubstr("without the tuple's comma"));
  EXPECT_THAT(shape_error("(1.5,)"), HasSubstr("not a tuple of integers"));
  EXPECT_THAT(shape_error("(a,)"), HasSubstr("not an integer"));
}

TEST_F(NpyFileTest, RejectsDataOfTheWrongLength) {
  const std::string six_floats = float_bytes(ramp(6));
  EXPECT_THAT(read_error(npy_bytes(dict("<f4", "(2, 3)"), six_floats.substr(0, 23))),
              AllOf(HasSubstr("shorter than shape (2, 3)"), HasSubstr("6 float32 values"), HasSubstr("23 bytes")));
  EXPECT_THAT(read_error(npy_bytes(dict("<f4", "(2, 3)"), six_floats + "\x01")),
              AllOf(HasSubstr("longer than shape (2, 3)"), HasSubstr("25 bytes")));
  EXPECT_THAT(read_error(npy_bytes(dict("<f4", "(2, 3)"), six_floats + six_floats)), HasSubstr("longer"));
  EXPECT_THAT(read_error(npy_bytes(dict("<f2", "(2, 3)"), six_floats)),
              AllOf(HasSubstr("longer"), HasSubstr("6 float16 values of 2 bytes")));
  EXPECT_THAT(read_error(npy_bytes(dict("<f4", "()"), "")), HasSubstr("shorter than shape ()"));
}

TEST_F(NpyFileTest, RejectsHeaderLengthBeyondTheFile) {
  for (const int major_version : {1, 2}) {
    std::string bytes = npy_bytes(dict("<f4", "(1,)"), "", major_version);
    const std::size_t length_bytes = major_version == 1 ? 2 : 4;
    bytes.replace(8, length_bytes, std::string(length_bytes, '\xff'));
    EXPECT_THAT(read_error(bytes), HasSubstr("goes beyond the end of the file"));
  }
}

TEST_F(NpyFileTest, EveryTruncationOfAValidFileIsAnError) {
  const std::vector<std::string> valid_files = {
      npy_bytes(dict("<f4", "(3, 4)"), float_bytes(ramp(12))),
      npy_bytes(dict("<f2", "(5,)"), std::string(10, '\x3c')),
      npy_bytes(dict("<f4", "(2,)"), float_bytes(ramp(2)), 3)};
  for (const std::string& bytes : valid_files) {
    ASSERT_EQ(read_error(bytes), "");
    for (std::size_t length = 0; length < bytes.size(); ++length) {
      SCOPED_TRACE(length);
      EXPECT_THROW(read_npy(write_bytes("truncated.npy", bytes.substr(0, length))), Error);
    }
  }
}

// A small fuzz: corrupted files must read or throw Error, never crash, hang or read out of bounds.
TEST_F(NpyFileTest, CorruptedFilesReadOrThrow) {
  const std::string valid = npy_bytes(dict("<f4", "(2, 3)"), float_bytes(ramp(6)));
  std::mt19937 random(20240601);
  std::uniform_int_distribution<std::size_t> position(0, valid.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes = valid;
    const int flips = 1 + trial % 4;
    for (int flip = 0; flip < flips; ++flip) bytes[position(random)] = static_cast<char>(byte(random));
    try {
      const NpyArray array = read_npy(write_bytes("fuzz.npy", bytes));
      std::size_t count = 1;
      for (const int64_t size : array.shape) count *= static_cast<std::size_t>(size);
      EXPECT_EQ(array.values.size(), count);
    } catch (const Error&) {
    }
  }
}

TEST_F(NpyFileTest, WriteFailureNamesThePath) {
  const float value = 1.0f;
  const std::string unwritable = path("no/such/folder/out.npy");
  EXPECT_THAT([&] { write_npy(unwritable, &value, {1}); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("cannot write"), HasSubstr(unwritable))));
  EXPECT_THAT([&] { write_npy(path("out.npy"), &value, {-1}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("negative size")));
}

// The stream entry (the .npy fuzzer's) reads bytes in memory as the path entry reads a file, and
// its messages name the stream as given.
TEST(NpyStreamTest, ReadsBytesInMemoryAndNamesTheStream) {
  const std::vector<float> values = ramp(6);
  const std::string bytes = npy_bytes(dict("<f4", "(2, 3)"), float_bytes(values));
  std::istringstream whole(bytes, std::ios::binary);
  const NpyArray array = read_npy(whole, "q in memory");
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
  expect_same_bits(array.values, values);

  std::istringstream truncated(bytes.substr(0, bytes.size() - 1), std::ios::binary);
  try {
    read_npy(truncated, "q in memory");
    ADD_FAILURE() << "a truncated stream was read";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("cannot read 'q in memory'"), HasSubstr("shorter than shape (2, 3)")));
  }
}

TEST(NpyShapeTest, ExpectShapeExplainsTheMismatch) {
  NpyArray array;
  array.shape = {2, 64, 4, 32};
  EXPECT_NO_THROW(expect_shape(array, {2, 64, 4, 32}, "q.npy", "B, S, H, D"));
  EXPECT_THAT([&] { expect_shape(array, {2, 128, 4, 32}, "q.npy", "B, S, H, D"); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("q.npy has shape (2, 64, 4, 32); expected (2, 128, 4, 32) (B, S, H, D)")));
  EXPECT_THAT([&] { expect_shape(array, {2}, "lse.npy"); },
              ::testing::ThrowsMessage<Error>(::testing::EndsWith("lse.npy has shape (2, 64, 4, 32); expected (2,)")));
}

TEST(NpyShapeTest, FormatsShapesAsNumpyPrintsThem) {
  EXPECT_EQ(format_shape({}), "()");
  EXPECT_EQ(format_shape({5}), "(5,)");
  EXPECT_EQ(format_shape({2, 3}), "(2, 3)");
}

}  // namespace
}  // namespace spattn::app
