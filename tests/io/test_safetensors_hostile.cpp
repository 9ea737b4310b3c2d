// io/safetensors.hpp under hostile headers: offsets must tile the data buffer exactly, every byte
// count is overflow-checked, empty tensors load without UB, and the header goes through the strict
// JSON reader (io/json_value.hpp). Each rejection names the tensor and the values.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/io.hpp"
#include "megacpp/megacpp.hpp"

using namespace megacpp;
using megacpp::testing::TempDir;
using Catch::Matchers::Contains;

namespace {
// A file assembled by hand from the spec: u64 LE header size, JSON header, data.
std::filesystem::path handmade(const TempDir& dir, const std::string& name, const std::string& header,
                               const std::string& data) {
  std::string bytes(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) bytes[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xFF);
  bytes += header + data;
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}
std::string tensor(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t begin,
                   std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}
}  // namespace

TEST_CASE("safetensors: tensors listed out of order but tiling the buffer load", "[io][safetensors]") {
  TempDir dir;
  const float values[] = {1, 2, 3, 4, 5};
  const std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  // "b" comes first in the header but second in the buffer; "e" is empty at the very end.
  const auto path = handmade(dir, "ok", "{" + tensor("b", "F32", "[3]", 8, 20) + "," + tensor("a", "F32", "[2]", 0, 8) +
                                            "," + tensor("e", "F32", "[0, 7]", 20, 20) + "}", data);
  io::SafetensorsReader r(path);
  CHECK(r.read<float, Cpu>("a").to_host() == std::vector<float>{1, 2});
  CHECK(r.read<float, Cpu>("b").to_host() == std::vector<float>{3, 4, 5});
  CHECK(r.read<float, Cpu>("e").shape() == Shape{0, 7});
}

TEST_CASE("safetensors: empty tensors load without UB, alone and between others", "[io][safetensors]") {
  TempDir dir;
  // A file with only an empty tensor has an empty data buffer (its data pointer is one past the
  // header): read() must not touch it, and Tensor::from_host must not memcpy(nullptr, nullptr, 0).
  io::SafetensorsReader only(handmade(dir, "only", "{" + tensor("z", "F64", "[0]", 0, 0) + "}", ""));
  const auto z = only.read<double, Cpu>("z");
  CHECK(z.shape() == Shape{0});
  CHECK(z.numel() == 0);
  CHECK(z.to_host().empty());
  const std::string data(4, '\x01');
  io::SafetensorsReader mid(handmade(dir, "mid", "{" + tensor("x", "U8", "[2]", 0, 2) + "," + tensor("e", "F32", "[3, 0]", 2, 2) +
                                                     "," + tensor("y", "U8", "[2]", 2, 4) + "}", data));
  CHECK(mid.read<float, Cpu>("e").shape() == Shape{3, 0});
  CHECK(mid.read<std::uint8_t, Cpu>("y").to_host() == std::vector<std::uint8_t>{1, 1});
  // The writer's side of the round trip.
  io::SafetensorsWriter w;
  w.add("empty", CpuTensor<float>(Shape{0, 4}));
  w.add("x", CpuTensor<float>::full(Shape{2}, 1.5f));
  w.write(dir / "rt");
  io::SafetensorsReader rt(dir / "rt");
  CHECK(rt.read<float, Cpu>("empty").shape() == Shape{0, 4});
  CHECK(rt.read<float, Cpu>("x").to_host() == std::vector<float>{1.5f, 1.5f});
}

TEST_CASE("safetensors: overlapping, holed or short tilings are refused naming both tensors", "[io][safetensors][errors]") {
  TempDir dir;
  const std::string d8(8, 'x'), d16(16, 'x');
  // Two tensors sharing bytes.
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "same", "{" + tensor("a", "F32", "[2]", 0, 8) + "," +
                                                                     tensor("b", "F32", "[2]", 0, 8) + "}", d8)),
                    Contains("tensor \"b\" at [0, 8) overlaps tensor \"a\" at [0, 8): tensors must not share bytes"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "partial", "{" + tensor("a", "F32", "[3]", 0, 12) + "," +
                                                                        tensor("b", "F32", "[1]", 8, 12) + "," +
                                                                        tensor("c", "F32", "[1]", 12, 16) + "}", d16)),
                    Contains("tensor \"b\" at [8, 12) overlaps tensor \"a\" at [0, 12)"));
  // An empty tensor inside another one's bytes is an overlap too (the reference reader refuses it).
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "inside", "{" + tensor("a", "F32", "[2]", 0, 8) + "," +
                                                                       tensor("e", "F32", "[0]", 4, 4) + "}", d8)),
                    Contains("tensor \"e\" at [4, 4) overlaps tensor \"a\" at [0, 8)"));
  // A hole: bytes no tensor owns, at the start and in the middle.
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "start", "{" + tensor("a", "F32", "[2]", 8, 16) + "}", d16)),
                    Contains("bytes [0, 8) of the data buffer belong to no tensor (a hole before tensor \"a\" at [8, 16))"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "hole", "{" + tensor("a", "F32", "[1]", 0, 4) + "," +
                                                                     tensor("b", "F32", "[1]", 12, 16) + "}", d16)),
                    Contains("bytes [4, 12) of the data buffer belong to no tensor (a hole before tensor \"b\""));
  // Bytes after the last tensor, and a buffer with no tensor at all.
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "tail", "{" + tensor("a", "F32", "[2]", 0, 8) + "}", d16)),
                    Contains("the tensors cover 8 bytes but the data buffer has 16: 8 trailing bytes belong to no tensor"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "none", "{\"__metadata__\":{}}", d8)),
                    Contains("the tensors cover 0 bytes but the data buffer has 8"));
  CHECK_NOTHROW(io::SafetensorsReader(handmade(dir, "nothing", "{}", "")));
}

TEST_CASE("safetensors: byte counts that overflow 64 bits are refused up front with the values", "[io][safetensors][errors]") {
  TempDir dir;
  // [2^61] of F64 is 2^64 bytes: unchecked, it wrapped to 0 and matched data_offsets [0, 0].
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "f64", "{" + tensor("x", "F64", "[2305843009213693952]", 0, 0) + "}", "")),
                    Contains("tensor \"x\"") && Contains("shape [2305843009213693952] of F64 (8 bytes each) needs more than 2^64 bytes"));
  // Overflow in the product of dims itself, even next to a zero dim.
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "dims", "{" + tensor("x", "U8", "[4294967296, 4294967296, 0]", 0, 0) + "}", "")),
                    Contains("shape [4294967296, 4294967296, 0] of U8 (1 bytes each) needs more than 2^64 bytes"));
  // Fits 64 bits but not the file: refused by the size check, not by an allocation.
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "big", "{" + tensor("x", "F32", "[1099511627776]", 0, 8) + "}", std::string(8, 'x'))),
                    Contains("holds 8 bytes but shape (1099511627776) of F32 needs 4398046511104"));
  // Offsets beyond int64 and negative ones are not integers the header may hold.
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "huge", R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})", "x")),
                    Contains("number 18446744073709551615 is outside the int64 range"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "neg", R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x")),
                    Contains("data_offsets [-1, 0] are not ordered"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "float", R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}})", "x")),
                    Contains("data_offsets must be [begin, end], two integers"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "negdim", R"({"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x")),
                    Contains("shape has a non-integer or negative dim"));
}

TEST_CASE("safetensors: the header goes through the strict JSON reader", "[io][safetensors][errors]") {
  TempDir dir;
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "deep", deep, "")),
                    Contains("malformed JSON: nesting deeper than the limit of 512 arrays and objects at byte 2560"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "zero", R"({"x":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}})", "x")),
                    Contains("number \"01\" has a leading zero at byte 29"));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "dup", "{" + tensor("x", "U8", "[1]", 0, 1) + "," + tensor("x", "U8", "[1]", 1, 2) + "}", "xx")),
                    Contains("duplicate key \"x\""));
  CHECK_THROWS_WITH(io::SafetensorsReader(handmade(dir, "utf8", "{" + tensor("\xFF", "U8", "[1]", 0, 1) + "}", "x")),
                    Contains("invalid UTF-8 in a string"));
  // The writer refuses names the reader would refuse, instead of writing an unreadable file.
  io::SafetensorsWriter w;
  w.add("bad\xC0\x80name", CpuTensor<float>(Shape{1}));
  CHECK_THROWS_WITH(w.write(dir / "w"), Contains("json_quote: string is not valid UTF-8 at byte 3"));
  CHECK_FALSE(std::filesystem::exists(dir / "w"));
}

TEST_CASE("safetensors: a path that is a directory is an Error naming it", "[io][safetensors][errors]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "model.safetensors");
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "model.safetensors"),
                    Contains("model.safetensors is not a regular file (it is a directory)"));
}

TEST_CASE("safetensors: a header past the reference reader's 100 MB cap is refused before it is parsed", "[io][safetensors][errors]") {
  TempDir dir;
  const std::uint64_t header = io::SafetensorsReader::kMaxHeaderBytes + 1;
  std::string size_field(8, '\0');
  std::uint64_t n = header;
  for (int i = 0; i < 8; ++i, n >>= 8) size_field[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xFF);
  const auto path = dir / "big_header.safetensors";
  std::ofstream(path, std::ios::binary).write(size_field.data(), 8);
  std::filesystem::resize_file(path, 8 + header);  // sparse: the file really holds that many bytes
  CHECK_THROWS_WITH(io::SafetensorsReader(path), Contains("header size 100000001 exceeds the limit of 100000000 bytes"));
}
