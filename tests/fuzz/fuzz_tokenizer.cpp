// libFuzzer harness: the tokenizer.json loader (megacpp/data/bpe_tokenizer.hpp).
//
// Input: the text of a tokenizer.json. An accepted tokenizer encodes a fixed sample (ASCII, code,
// digits, CRLF, multi-byte UTF-8, its own special tokens) to ids inside its vocabulary, or refuses
// with megacpp::Error when a byte has no token; the ids decode back to the sample, up to the
// spaces that `add_prefix_space` puts before each piece (the class comment's guarantee), unless
// a Split step removes what it matches.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

namespace {

using namespace std::string_view_literals;

// A NUL and a 0xFF byte included: the literal's suffix keeps its whole length.
constexpr std::string_view kSample =
    "<|endoftext|>int main() {\r\n  return 42;  // caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x99\x82\n}\n"
    "<fim_prefix>it's 1234567 ok<fim_suffix>\t\tdon't<fim_middle> \x00\xFF end"sv;

// True when `decoded` is `text` with zero or more spaces inserted.
bool equal_up_to_inserted_spaces(std::string_view decoded, std::string_view text) {
  std::size_t j = 0;
  for (const char c : decoded) {
    if (j < text.size() && c == text[j]) ++j;
    else if (c != ' ') return false;
  }
  return j == text.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using megacpp::fuzz::require;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const std::string_view sample = kSample;
  try {
    const auto tok = megacpp::data::BpeTokenizer::from_json(json);
    for (const bool ordinary : {false, true}) {
      const std::vector<std::int32_t> ids = ordinary ? tok.encode_ordinary(sample) : tok.encode(sample);
      for (const std::int32_t id : ids) require(id >= 0 && id < tok.vocab_size(), "encode gave an id outside the vocab");
      if (!tok.drops_text())  // a Split with behavior Removed drops what it matches, by definition
        require(equal_up_to_inserted_spaces(tok.decode(ids), sample), "decode(encode(sample)) differs from the sample");
    }
  } catch (const megacpp::Error&) {
    // rejected with a message: the expected outcome for most inputs
  }
  return 0;
}
