// Named streams and the mixture loader: --mix parsing and its errors, stream names from shard
// file names, row shares within 1% of the weights over 10,000 rows, determinism from the seed,
// resume from a saved position, and single-stream data read exactly as ShardLoader reads it.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"
#include "megacpp/megacpp.hpp"

using namespace megacpp;
using namespace megacpp::data;
using Catch::Matchers::Contains;

namespace {
// A directory with streams code (tokens 1), text (2) and math (3), each over two shards.
struct Streams {
  megacpp::testing::TempDir dir;
  Streams() {
    const std::map<std::string, std::uint32_t> ids{{"code", 1}, {"text", 2}, {"math", 3}};
    for (const auto& [name, id] : ids)
      for (int shard = 0; shard < 2; ++shard) {
        std::vector<std::uint32_t> tokens(997, id);
        for (std::size_t i = 0; i < tokens.size(); i += 50) tokens[i] = 256;  // BOS now and then
        write_shard(dir / ("train_" + name + "_00000" + std::to_string(shard) + ".bin"), tokens);
      }
  }
};

// The next micro-batch on the CPU (a function, so the template's comma stays out of Catch's macros).
template <class Loader>
PackedBatch<float, Cpu> next_of(Loader& loader) {
  return loader.template next<float, Cpu>();
}

// The stream (1 code, 2 text, 3 math) of each row: its first token that is not BOS.
std::vector<int> row_streams(const PackedBatch<float, Cpu>& b) {
  std::vector<int> out;
  for (index_t r = 0; r < b.batch; ++r) {
    int s = 0;
    for (index_t t = 0; t < b.seq && s == 0; ++t)
      if (b.input_ids_host[r * b.seq + t] != 256) s = b.input_ids_host[r * b.seq + t];
    out.push_back(s);
  }
  return out;
}
}  // namespace

TEST_CASE("parse_mixture: name=weight pairs summing to 1, every error naming the value", "[data][mixture]") {
  const Mixture m = parse_mixture("code=0.7,text=0.2,math=0.1");
  REQUIRE(m.size() == 3);
  CHECK(m[0].stream == "code");
  CHECK(m[2].weight == 0.1);
  CHECK(format_mixture(m) == "code=0.7,text=0.2,math=0.1");
  CHECK_THROWS_WITH(parse_mixture("code=0.7,text=0.2"), Contains("sum to 0.9, not 1"));
  CHECK_THROWS_WITH(parse_mixture("code=1.2,text=-0.2"), Contains("weight 1.2 of code is outside [0, 1]"));
  CHECK_THROWS_WITH(parse_mixture("code=0.5,text=-0.5,math=1"), Contains("weight -0.5 of text is outside [0, 1]"));
  CHECK_THROWS_WITH(parse_mixture("code=abc"), Contains("weight \"abc\" of code is not a number"));
  CHECK_THROWS_WITH(parse_mixture("code=nan"), Contains("weight \"nan\" of code is not a number"));
  CHECK_THROWS_WITH(parse_mixture("Code=1"), Contains("stream name \"Code\" must be 1-32 lowercase letters and digits"));
  CHECK_THROWS_WITH(parse_mixture("code=0.5,code=0.5"), Contains("stream \"code\" is given twice"));
  CHECK_THROWS_WITH(parse_mixture("code"), Contains("\"code\" is not name=weight"));
  CHECK_THROWS_WITH(parse_mixture(""), Contains("is empty"));
}

TEST_CASE("list_streams: stream names from shard file names; unnamed and named shards do not mix", "[data][mixture]") {
  CHECK(shard_stream("train_000000.bin", "train").empty());
  CHECK(shard_stream("train_code_000003.bin", "train") == "code");
  CHECK(shard_stream("/x/val_math2_000000.bin", "val") == "math2");
  Streams s;
  const auto streams = list_streams(s.dir.path, "train");
  REQUIRE(streams.size() == 3);
  CHECK(streams.at("code").size() == 2);
  write_shard(s.dir / "train_000000.bin", std::vector<std::uint32_t>(100, 1));
  CHECK_THROWS_WITH(list_streams(s.dir.path, "train"), Contains("mixes unnamed train_NNNNNN.bin shards with named streams"));
}

TEST_CASE("MixtureLoader: row shares within 1% of the weights over 10,000 rows", "[data][mixture]") {
  Streams s;
  for (const char* mix : {"code=0.7,text=0.2,math=0.1", "code=0.5,text=0.3,math=0.2", "code=0.7,text=0.3"}) {
    INFO(mix);
    MixtureLoader loader(list_streams(s.dir.path, "train"), 50, 8, ByteTokenizer::kVocab, 42);
    const Mixture m = parse_mixture(mix);
    loader.set_mixture(m);
    std::map<int, double> share;
    for (int step = 0; step < 200; ++step)
      for (const int r : row_streams(loader.next<float, Cpu>())) share[r] += 1.0 / 10000;
    const std::map<std::string, int> id{{"code", 1}, {"text", 2}, {"math", 3}};
    double named = 0;
    for (const auto& w : m) {
      CHECK(share[id.at(w.stream)] == Approx(w.weight).margin(0.01));
      named += share[id.at(w.stream)];
    }
    CHECK(named == Approx(1.0));  // a stream the mixture does not name gets no row
  }
}

TEST_CASE("MixtureLoader: same seed same rows, and seek() resumes them exactly", "[data][mixture]") {
  Streams s;
  const auto streams = list_streams(s.dir.path, "train");
  const Mixture m = parse_mixture("code=0.7,text=0.2,math=0.1");
  MixtureLoader a(streams, 4, 16, ByteTokenizer::kVocab, 7), b(streams, 4, 16, ByteTokenizer::kVocab, 7),
      other(streams, 4, 16, ByteTokenizer::kVocab, 8);
  a.set_mixture(m);
  b.set_mixture(m);
  other.set_mixture(m);
  std::vector<std::int32_t> rows_a, rows_other;
  MixturePosition saved;
  std::vector<std::vector<std::int32_t>> after;
  for (int step = 0; step < 120; ++step) {  // 480 rows: every stream wraps its shards
    if (step == 37) saved = a.position();
    const auto ba = a.next<float, Cpu>(), bb = b.next<float, Cpu>(), bo = other.next<float, Cpu>();
    CHECK(ba.input_ids_host == bb.input_ids_host);
    CHECK(ba.loss_mask_host == bb.loss_mask_host);
    if (step >= 37) after.push_back(ba.input_ids_host);
    for (const int r : row_streams(ba)) rows_a.push_back(r);
    for (const int r : row_streams(bo)) rows_other.push_back(r);
  }
  CHECK(rows_a != rows_other);  // another seed draws other streams
  CHECK(a.position().streams.at("code").epoch > 0);
  MixtureLoader resumed(streams, 4, 16, ByteTokenizer::kVocab, 999);  // the seed is in the position
  resumed.set_mixture(m);
  resumed.seek(saved);
  CHECK(resumed.position() == saved);
  for (const auto& expected : after) CHECK(next_of(resumed).input_ids_host == expected);
  // A position for other streams is refused, naming the stream.
  MixturePosition wrong = saved;
  wrong.streams.erase("math");
  wrong.streams["prose"] = {};
  CHECK_THROWS_WITH(resumed.seek(wrong), Contains("no position for stream \"math\""));
}

TEST_CASE("MixtureLoader: unknown streams and weights are errors; one unnamed stream reads as before", "[data][mixture]") {
  Streams s;
  MixtureLoader loader(list_streams(s.dir.path, "train"), 2, 8, ByteTokenizer::kVocab, 1);
  CHECK_THROWS_WITH(next_of(loader), Contains("no mixture set"));
  CHECK_THROWS_WITH(loader.set_mixture({{"code", 0.5}, {"prose", 0.5}}),
                    Contains("unknown stream \"prose\": the data has streams code, math, text"));
  CHECK_THROWS_WITH(loader.set_mixture({{"code", -1.0}, {"text", 2.0}}), Contains("weight -1 of code is negative"));
  CHECK_THROWS_WITH(loader.set_mixture({{"code", 0.0}}), Contains("gives every stream weight 0"));

  megacpp::testing::TempDir single;
  std::vector<std::uint32_t> tokens(500);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint32_t>(i % 250);
  write_shard(single / "train_000000.bin", tokens);
  MixtureLoader one(list_streams(single.path, "train"), 3, 10, ByteTokenizer::kVocab, 1);
  ShardLoader plain(list_shards(single.path, "train_"), 3, 10, ByteTokenizer::kVocab);
  CHECK_FALSE(one.mixed());
  CHECK_THROWS_WITH(one.set_mixture({{"code", 1.0}}), Contains("one unnamed stream"));
  for (int step = 0; step < 40; ++step) CHECK(next_of(one).input_ids_host == next_of(plain).input_ids_host);
  CHECK(one.single_position() == plain.position());
}
