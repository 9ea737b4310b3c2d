// Token-for-token agreement with Hugging Face `tokenizers` on the two pre-tokenizer styles a code
// model meets: GPT-2's ByteLevel regex and Llama-3's Split regex (digits in groups of three,
// case-insensitive contractions, newlines kept with punctuation) followed by ByteLevel without
// its regex. The tokenizer.json files and Hugging Face's ids of 12 documents (unicode, CRLF,
// numbers, contractions, code, unusual whitespace) are written by scripts/tokenizer-goldens.py.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/data/bpe_tokenizer.hpp"

using megacpp::data::BpeSpecialNames;
using megacpp::data::BpeTokenizer;
using Ids = std::vector<std::int32_t>;

namespace {
const std::string kDir = MEGACPP_TOKENIZER_FIXTURES;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

BpeSpecialNames endoftext_only() {
  BpeSpecialNames n;
  n.bos = n.eos = n.fim_prefix = n.fim_suffix = n.fim_middle = "<|endoftext|>";
  return n;
}
}  // namespace

TEST_CASE("BpeTokenizer agrees with Hugging Face tokenizers on GPT-2- and Llama-3-style files", "[data][bpe]") {
  const nlohmann::json expected = read_json(kDir + "/expected.json");
  const auto& documents = expected.at("documents");
  REQUIRE(documents.size() == 12);
  for (const char* style : {"gpt2-style", "llama3-style"}) {
    const BpeTokenizer tok = BpeTokenizer::from_file(kDir + "/" + style + ".json", endoftext_only());
    int agree = 0;
    for (std::size_t d = 0; d < documents.size(); ++d) {
      const std::string doc = documents[d].get<std::string>();
      const Ids want = expected.at(style)[d].get<Ids>();
      const Ids got = tok.encode(doc);
      INFO(style << " document " << d << ": " << doc);
      CHECK(got == want);
      CHECK(tok.decode(got) == doc);
      agree += got == want;
    }
    CHECK(agree == 12);
  }
}

TEST_CASE("BpeTokenizer agrees with Hugging Face on 300 adversarial strings of each style", "[data][bpe]") {
  // Random strings over the characters where \s, \p{L} and \p{N} differ between regex engines
  // (scripts/tokenizer-goldens.py RANDOM_ALPHABET): U+0085, U+180E, U+200B, U+FEFF, ...
  const nlohmann::json adversarial = read_json(kDir + "/adversarial.json");
  const auto& documents = adversarial.at("documents");
  REQUIRE(documents.size() == 300);
  for (const char* style : {"gpt2-style", "llama3-style"}) {
    const BpeTokenizer tok = BpeTokenizer::from_file(kDir + "/" + style + ".json", endoftext_only());
    std::size_t agree = 0;
    for (std::size_t d = 0; d < documents.size(); ++d) {
      const Ids want = adversarial.at(style)[d].get<Ids>();
      const bool same = tok.encode(documents[d].get<std::string>()) == want;
      if (!same) UNSCOPED_INFO(style << " differs on document " << d << ": " << documents[d].dump());
      agree += same;
    }
    CHECK(agree == documents.size());
  }
}

TEST_CASE("BpeTokenizer: the two styles really split differently", "[data][bpe]") {
  // Guards the test above against fixtures that happen not to exercise the Split regex.
  const BpeTokenizer gpt2 = BpeTokenizer::from_file(kDir + "/gpt2-style.json", endoftext_only());
  const BpeTokenizer llama3 = BpeTokenizer::from_file(kDir + "/llama3-style.json", endoftext_only());
  using Pieces = std::vector<std::string>;
  CHECK(gpt2.pieces("x = 1234567;\r\n") == Pieces{"x", " =", " 1234567", ";", "\r\n"});
  CHECK(llama3.pieces("x = 1234567;\r\n") == Pieces{"x", " =", " ", "123", "456", "7", ";\r\n"});
  CHECK(gpt2.pieces("I'M") == Pieces{"I", "'", "M"});
  CHECK(llama3.pieces("I'M") == Pieces{"I", "'M"});
}

TEST_CASE("BpeTokenizer: configurations it cannot reproduce are refused naming the part", "[data][bpe][errors]") {
  nlohmann::json base = read_json(kDir + "/llama3-style.json");
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& message) {
    nlohmann::json j = base;
    edit(j);
    CHECK_THROWS_WITH(BpeTokenizer::from_json(j.dump(), endoftext_only()), Catch::Matchers::Contains(message));
  };
  refused([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer \"NFC\" is not supported");
  refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}}; },
          "pre_tokenizer step \"Whitespace\" is not supported");
  refused([](auto& j) { j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0]; }, "needs a ByteLevel");
  refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}}; },
          "does not compile at offset 9");
  refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
          "Split.behavior \"Sideways\" is unknown");
  refused([](auto& j) { j["model"]["dropout"] = 0.1; }, "model.dropout = 0.1 is not supported");
  refused([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }, "has lstrip = true, which is not supported");
}

TEST_CASE("PreTokenizer: Split behaviors, invert, Digits and invalid UTF-8", "[data][bpe]") {
  using megacpp::data::PreTokenizer;
  using Pieces = std::vector<std::string>;
  const auto split = [](const nlohmann::json& node, const std::string& text) {
    Pieces out;
    PreTokenizer::from_json(node, "test").split(text, out);
    return out;
  };
  const auto on_dash = [](const char* behavior, bool invert = false) {
    return nlohmann::json{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
  };
  // Hugging Face's own tests of SplitDelimiterBehavior (tokenizers/src/tokenizer/normalizer.rs).
  const std::string text = "The-final--countdown";
  CHECK(split(on_dash("Removed"), text) == Pieces{"The", "final", "countdown"});
  CHECK(split(on_dash("Isolated"), text) == Pieces{"The", "-", "final", "-", "-", "countdown"});
  CHECK(split(on_dash("MergedWithPrevious"), text) == Pieces{"The-", "final-", "-", "countdown"});
  CHECK(split(on_dash("MergedWithNext"), text) == Pieces{"The", "-final", "-", "-countdown"});
  CHECK(split(on_dash("Contiguous"), text) == Pieces{"The", "-", "final", "--", "countdown"});
  CHECK(split(on_dash("Removed", true), text) == Pieces{"-", "-", "-"});
  CHECK(PreTokenizer::from_json(on_dash("Removed"), "test").drops_text());
  CHECK_FALSE(PreTokenizer::from_json(on_dash("Isolated"), "test").drops_text());
  const nlohmann::json digits{{"type", "Digits"}, {"individual_digits", true}};
  CHECK(split(digits, "a1\xD9\xA2" "3b") == Pieces{"a", "1", "\xD9\xA2", "3", "b"});  // U+0662 is numeric
  CHECK(split({{"type", "Digits"}, {"individual_digits", false}}, "a123b") == Pieces{"a", "123", "b"});
  // U+180E is not white space for Hugging Face (Oniguruma, Unicode >= 6.3); PCRE2's \h says it is.
  CHECK(BpeTokenizer::pre_tokenize("\x0c\n \xE1\xA0\x8E\xE1\xA0\x8E") == Pieces{"\x0c\n", " \xE1\xA0\x8E\xE1\xA0\x8E"});
  // Invalid UTF-8 (0xFF, a lone continuation byte): each such byte is a piece, the rest is split as usual.
  CHECK(BpeTokenizer::pre_tokenize("ab\xFF" "cd \x80 ef") == Pieces{"ab", "\xFF", "cd", " ", "\x80", " ef"});
}
