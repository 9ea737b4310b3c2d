// safetensors: round trips, a hand-built file read per the spec, and every kind of corruption.
#include <catch2/catch.hpp>

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
void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
// A file assembled by hand from the spec: u64 LE header size, JSON header, data.
std::string handmade(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xFF);
  return out + header + data;
}
}  // namespace

TEST_CASE("safetensors: write then read back every dtype, shape and metadata bitwise", "[io]") {
  TempDir dir;
  Rng rng(1);
  const auto f = randn<float, Cpu>({3, 4}, rng);
  const auto d = randn<double, Cpu>({2}, rng);
  const auto b = randn<float, Cpu>({5}, rng).to<bf16>();
  const auto i = CpuTensor<std::int32_t>::from_host({2, 2}, {1, -2, 3, 2147483647});
  const auto scalar = CpuTensor<float>::scalar(7.5f);
  io::SafetensorsWriter w;
  w.add("blocks.0.attn.wq", f);
  w.add("step", d);
  w.add("emb", b);
  w.add("ids", i);
  w.add("scalar", scalar);
  w.set_metadata("format", "megacpp \"quoted\"\n");
  w.write(dir / "ckpt.safetensors");

  io::SafetensorsReader r(dir / "ckpt.safetensors");
  CHECK(r.names().size() == 5);
  CHECK(r.metadata().at("format") == "megacpp \"quoted\"\n");
  CHECK(r.read<float, Cpu>("blocks.0.attn.wq").to_host() == f.to_host());
  CHECK(r.read<double, Cpu>("step").to_host() == d.to_host());
  const auto b2 = r.read<bf16, Cpu>("emb").to_host();
  for (std::size_t k = 0; k < b2.size(); ++k) CHECK(b2[k].bits == b.to_host()[k].bits);
  CHECK(r.read<std::int32_t, Cpu>("ids").to_host() == i.to_host());
  CHECK(r.read<float, Cpu>("scalar").shape() == Shape{});
  CHECK(r.entry("ids").dtype == "I32");
  const std::string raw = megacpp::testing::file_bytes(dir / "ckpt.safetensors");
  std::uint64_t header_size = 0;
  for (int k = 7; k >= 0; --k) header_size = (header_size << 8) | static_cast<unsigned char>(raw[k]);
  CHECK(header_size % 8 == 0);  // data buffer aligned
  CHECK_FALSE(std::filesystem::exists(dir / ("ckpt.safetensors.tmp." + std::to_string(::getpid()))));
}

TEST_CASE("safetensors: reads a file assembled by hand from the spec", "[io]") {
  TempDir dir;
  const float values[] = {1.5f, -2.0f};
  const std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  write_bytes(dir / "h.safetensors",
              handmade(R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  io::SafetensorsReader r(dir / "h.safetensors");
  CHECK(r.read<float, Cpu>("x").to_host() == std::vector<float>{1.5f, -2.0f});
  CHECK(r.metadata().at("k") == "v");
}

TEST_CASE("safetensors: corrupt or mismatched files are errors naming the problem", "[io][errors]") {
  TempDir dir;
  const std::string f8(8, 'x');
  write_bytes(dir / "short", "abc");
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "short"), Contains("too short for a header"));
  write_bytes(dir / "huge", handmade(std::string(16, ' '), "").replace(0, 8, std::string("\xff\xff\x00\x00\x00\x00\x00\x00", 8)));
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "huge"), Contains("header size 65535 exceeds the file"));
  write_bytes(dir / "json", handmade(R"({"x":{"dtype":"F32",)", f8));
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "json"), Contains("malformed JSON: unexpected end of input at byte 20"));
  write_bytes(dir / "trunc", handmade(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f8));
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "trunc"), Contains("exceeds the data buffer of 8 bytes: the file is truncated"));
  write_bytes(dir / "size", handmade(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f8));
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "size"), Contains("holds 8 bytes but shape (3) of F32 needs 12"));
  write_bytes(dir / "dtype", handmade(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", f8));
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "dtype"), Contains("unknown dtype \"Q7\""));
  write_bytes(dir / "ok", handmade(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f8));
  io::SafetensorsReader ok(dir / "ok");
  CHECK_THROWS_WITH((ok.read<double, Cpu>("x")), Contains("tensor \"x\" has dtype F32, expected F64"));
  const Shape expected{3};
  CHECK_THROWS_WITH((ok.read<float, Cpu>("x", &expected)), Contains("has shape (2), expected (3)"));
  CHECK_THROWS_WITH((ok.read<float, Cpu>("y")), Contains("no tensor named \"y\""));
  CHECK_THROWS_WITH(io::SafetensorsReader(dir / "missing"), Contains("cannot open"));
}

TEST_CASE("atomic_write replaces a file whole", "[io]") {
  TempDir dir;
  const std::string first = "first version", second = "second";
  io::atomic_write(dir / "f", std::span<const char>(first));
  io::atomic_write(dir / "f", std::span<const char>(second));
  CHECK(megacpp::testing::file_bytes(dir / "f") == "second");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);  // no temp left
  CHECK_THROWS_WITH((io::atomic_write(dir / "no_such_dir" / "f", std::span<const char>(first))), Contains("cannot create"));
}
