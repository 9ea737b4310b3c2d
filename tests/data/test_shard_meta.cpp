// shards.json (megacpp/data/shard_meta.hpp): round trip, and every wrong field named.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"

using namespace megacpp;
using namespace megacpp::data;
using megacpp::testing::TempDir;
using Catch::Matchers::Contains;

namespace {
const std::string kGood = R"({"format": 1, "tokenizer": "bpe", "tokenizer_hash": "fnv1a64:00000000000000aa",
  "vocab_size": 49152, "bos": 0, "eos": 0, "fim_prefix": 1, "fim_suffix": 2, "fim_middle": 3})";

// kGood with the first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string s = kGood;
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}
}  // namespace

TEST_CASE("shards.json: written and read back; the byte tokenizer's defaults", "[data][shard_meta]") {
  TempDir dir;
  ShardMetadata m;
  m.tokenizer = "bpe";
  m.tokenizer_hash = tokenizer_fingerprint("{\"model\": {}}");
  m.vocab_size = 49152;
  m.special = {0, 0, 1, 2, 3};
  write_shard_metadata(dir.path, m);
  CHECK(read_shard_metadata(dir.path) == m);
  CHECK(m.tokenizer_hash.size() == 8 + 16);
  CHECK(tokenizer_fingerprint("a") != tokenizer_fingerprint("b"));
  write_shard_metadata(dir.path, byte_shard_metadata());
  const ShardMetadata b = read_shard_metadata(dir.path);
  CHECK(b.special.bos == 256);
  CHECK(b.special.fim_middle == 260);
  CHECK(b.vocab_size == ByteTokenizer::kVocab);
  CHECK_NOTHROW(check_vocabulary(b, 264, "x"));
  CHECK_THROWS_WITH(check_vocabulary(m, 264, "x"), Contains("49152") && Contains("264"));
}

TEST_CASE("shards.json: a missing file or a wrong field is an error naming it", "[data][shard_meta][errors]") {
  TempDir dir;
  CHECK_THROWS_WITH(read_shard_metadata(dir.path), Contains("no shards.json in"));
  auto fails = [&](const std::string& text, const std::string& message) {
    std::ofstream(dir / kShardMetadataFile, std::ios::trunc) << text;
    CHECK_THROWS_WITH(read_shard_metadata(dir.path), Contains(message));
  };
  fails(kGood.substr(0, 30), "shards.json");
  fails(edited("\"format\": 1", "\"format\": 2"), "unknown format 2");
  fails(edited("\"bos\": 0, ", ""), "missing key \"bos\"");
  fails(edited("\"bos\": 0", "\"bos\": \"0\""), "field \"bos\" is not an integer");
  fails(edited("\"bos\": 0", "\"bos\": -1"), "field \"bos\" = -1 outside");
  fails(edited("\"fim_middle\": 3", "\"fim_middle\": 49152"), "fim_middle id 49152 is outside the vocabulary [0, 49152)");
  fails(edited("\"fim_suffix\": 2", "\"fim_suffix\": 1"), "fim_suffix and fim_prefix share id 1");
  fails(edited("\"tokenizer\": \"bpe\"", "\"tokenizer\": \"wordpiece\""), "neither \"byte\" nor \"bpe\"");
  fails(edited("\"tokenizer\": \"bpe\"", "\"tokenizer\": \"byte\""), "with ids other than the byte tokenizer's");
}
