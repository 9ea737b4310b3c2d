// Checkpoints written elsewhere: a bf16, f16 or f64 export of a model loads into its fp32 weights
// by value (widening exactly), a non-floating dtype is refused naming it, and megacpp's own files
// carry the "format": "pt" metadata Hugging Face transformers checks.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/io/checkpoint.hpp"
#include "megacpp/megacpp.hpp"

using namespace megacpp;
using megacpp::testing::TempDir;
using Catch::Matchers::Contains;

namespace {
// Two parameters, enough to show every tensor of a file goes through the conversion.
struct TwoParams {
  using value_type = float;
  using backend_type = Cpu;
  Param<float, Cpu> w, b;
  explicit TwoParams(std::uint64_t seed) {
    Rng rng(seed);
    w = Param<float, Cpu>::normal(Shape{3, 5}, Role::matrix, rng, 1.0);
    b = Param<float, Cpu>::normal(Shape{5}, Role::bias, rng, 1.0);
  }
  template <class Visitor>
  void for_each_param(Visitor&& visit) {
    visit("w", w);
    visit("b", b);
  }
};

// The model's parameters written as element type S (another program's export of it).
template <class S>
void export_as(const std::filesystem::path& path, TwoParams& m) {
  io::SafetensorsWriter writer;
  writer.set_metadata(io::kModelTypeKey, "two");
  writer.add("w", m.w.var.value().to<S>());
  writer.add("b", m.b.var.value().to<S>());
  writer.write(path);
}

// What loading `m` written as S must give: each value rounded to S, then widened exactly.
template <class S>
std::vector<float> through(const Tensor<float, Cpu>& t) {
  return t.to<S>().template to<float>().to_host();
}
}  // namespace

TEST_CASE("checkpoint: bf16, f16 and f64 exports load into fp32 weights by value", "[io][checkpoint]") {
  TempDir dir;
  TwoParams source(1);
  export_as<bf16>(dir / "bf16.safetensors", source);
  export_as<f16>(dir / "f16.safetensors", source);
  export_as<double>(dir / "f64.safetensors", source);

  TwoParams loaded(2);
  io::load_model(dir / "bf16.safetensors", loaded, "two");
  CHECK(loaded.w.var.value().to_host() == through<bf16>(source.w.var.value()));
  CHECK(loaded.b.var.value().to_host() == through<bf16>(source.b.var.value()));
  io::load_model(dir / "f16.safetensors", loaded, "two");
  CHECK(loaded.w.var.value().to_host() == through<f16>(source.w.var.value()));
  io::load_model(dir / "f64.safetensors", loaded, "two");  // fp32 -> f64 -> fp32 is exact
  CHECK(loaded.w.var.value().to_host() == source.w.var.value().to_host());
  CHECK(loaded.b.var.value().to_host() == source.b.var.value().to_host());
}

TEST_CASE("checkpoint: a non-floating tensor is refused naming its dtype, and nothing changes", "[io][checkpoint][errors]") {
  TempDir dir;
  TwoParams source(1);
  io::SafetensorsWriter writer;
  writer.set_metadata(io::kModelTypeKey, "two");
  writer.add("w", source.w.var.value());
  writer.add("b", Tensor<std::int32_t, Cpu>::from_host(Shape{5}, {1, 2, 3, 4, 5}));
  writer.write(dir / "int.safetensors");
  TwoParams loaded(2);
  const auto before = loaded.w.var.value().to_host();
  CHECK_THROWS_WITH(io::load_model(dir / "int.safetensors", loaded, "two"),
                    Contains("tensor \"b\" has dtype I32, which does not convert to F32"));
  CHECK(loaded.w.var.value().to_host() == before);
}

TEST_CASE("checkpoint: megacpp's model files carry \"format\": \"pt\"", "[io][checkpoint]") {
  TempDir dir;
  TwoParams m(1);
  io::save_model(dir / "m.safetensors", m, "two");
  const io::SafetensorsReader reader(dir / "m.safetensors");
  CHECK(reader.metadata().at("format") == "pt");
  CHECK(reader.metadata().at(io::kModelTypeKey) == "two");
}
