// BpeTokenizer under hostile tokenizer.json text and paths: the strict JSON reader
// (io/json_value.hpp) runs before nlohmann, so nesting, grammar, UTF-8 and duplicate keys are
// refused naming the value and the byte; a directory is an Error, not std::ios_base::failure.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "data/temp_dir.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

using namespace megacpp;
using namespace megacpp::data;
using Catch::Matchers::Contains;

namespace {
// The smallest byte-level tokenizer.json the loader accepts: two vocab tokens, no merges, the
// four special tokens BpeSpecialNames expects by default as added tokens (vocab size 6).
const std::string kMinimal =
    R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},)"
    R"("added_tokens":[{"id":2,"content":"<|endoftext|>","special":true},{"id":3,"content":"<fim_prefix>","special":true},)"
    R"({"id":4,"content":"<fim_suffix>","special":true},{"id":5,"content":"<fim_middle>","special":true}]})";
// kMinimal with `"extra": <value>,` spliced in first: a member the loader ignores.
std::string with_extra_member(const std::string& value) { return "{\"extra\":" + value + "," + kMinimal.substr(1); }
std::string nested_arrays(int depth) {
  return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
}
}  // namespace

TEST_CASE("BpeTokenizer: nesting up to the JSON limit loads, deeper is refused naming the limit", "[data][bpe][errors]") {
  CHECK(BpeTokenizer::from_json(kMinimal).vocab_size() == 6);
  // The top-level object is one level: 511 arrays inside it reach the limit of 512.
  CHECK(BpeTokenizer::from_json(with_extra_member(nested_arrays(io::kJsonMaxDepth - 1))).vocab_size() == 6);
  CHECK_THROWS_WITH(BpeTokenizer::from_json(with_extra_member(nested_arrays(io::kJsonMaxDepth))),
                    Contains("BpeTokenizer tokenizer JSON: malformed JSON: nesting deeper than the limit of 512 arrays "
                             "and objects at byte 520"));
  // 200,000 levels parsed in nlohmann and then overflowed the stack when copied or dumped.
  CHECK_THROWS_WITH(BpeTokenizer::from_json(with_extra_member(nested_arrays(200000))),
                    Contains("nesting deeper than the limit of 512 arrays and objects"));
}

TEST_CASE("BpeTokenizer: bad grammar, bad UTF-8 and duplicate keys are refused naming the byte", "[data][bpe][errors]") {
  CHECK_THROWS_WITH(BpeTokenizer::from_json(with_extra_member("01")), Contains("number \"01\" has a leading zero at byte 10"));
  CHECK_THROWS_WITH(BpeTokenizer::from_json(with_extra_member(R"("\udc00")")),
                    Contains("lone low surrogate \\uDC00 in a string at byte 10"));
  CHECK_THROWS_WITH(BpeTokenizer::from_json(with_extra_member("\"\xC0\x80\"")),
                    Contains("invalid UTF-8 in a string (an overlong encoding (lead byte 0xC0 or 0xC1): 0xC0 0x80) at byte 10"));
  CHECK_THROWS_WITH(BpeTokenizer::from_json(kMinimal + "x"), Contains("trailing characters after the value: 'x'"));
  // A vocab token listed twice: nlohmann would keep the last id silently.
  std::string twice = kMinimal;
  twice.insert(twice.find("\"b\":1") + 5, ",\"a\":7");
  CHECK_THROWS_WITH(BpeTokenizer::from_json(twice), Contains("duplicate key \"a\" at byte 44"));
}

TEST_CASE("BpeTokenizer: a tokenizer path that is a directory is an Error, not std::ios_base::failure", "[data][bpe][errors]") {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "tokenizer.json");
  CHECK_THROWS_AS(BpeTokenizer::from_file(dir / "tokenizer.json"), Error);
  CHECK_THROWS_WITH(BpeTokenizer::from_file(dir / "tokenizer.json"),
                    Contains("tokenizer.json is not a regular file (it is a directory)"));
}
