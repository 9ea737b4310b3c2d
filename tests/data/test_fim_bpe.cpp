// Structured FIM on a byte-level BPE vocabulary: the spans found in the text map to token spans
// through the tokens' byte offsets, and the PSM document decodes to the expected prefix, middle
// and suffix of hand-made files.
#include <catch2/catch.hpp>

#include <span>
#include <string>
#include <vector>

#include "megacpp/data.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

using namespace megacpp;
using namespace megacpp::data;

namespace {
const std::string kDir = MEGACPP_TOKENIZER_FIXTURES;

BpeSpecialNames endoftext_only() {
  BpeSpecialNames n;
  n.bos = n.eos = n.fim_prefix = n.fim_suffix = n.fim_middle = "<|endoftext|>";
  return n;
}

struct Expected {
  std::string text, prefix, middle, suffix;
};

// The document's PSM layout for middle body[m.begin, m.end), decoded part by part.
void check_split(const BpeTokenizer& tok, const std::vector<std::int32_t>& doc, const FimSplit& m, const Expected& e) {
  const std::vector<std::int32_t> body(doc.begin() + 1, doc.end() - 1);
  REQUIRE(m.end <= body.size());
  const auto part = [&](std::size_t a, std::size_t b) {
    return tok.decode(std::vector<std::int32_t>(body.begin() + static_cast<std::ptrdiff_t>(a),
                                                body.begin() + static_cast<std::ptrdiff_t>(b)));
  };
  CHECK(part(0, m.begin) == e.prefix);
  CHECK(part(m.begin, m.end) == e.middle);
  CHECK(part(m.end, body.size()) == e.suffix);
}
}  // namespace

TEST_CASE("structured FIM on a BPE vocabulary: prefix, middle and suffix of hand-made files", "[data][fim][bpe]") {
  for (const char* style : {"gpt2-style", "llama3-style"}) {
    INFO(style);
    const BpeTokenizer tok = BpeTokenizer::from_file(kDir + "/" + style + ".json", endoftext_only());
    const std::string fn = "// Returns the larger of a and b.\nint max(int a, int b) {\n  return a > b ? a : b;\n}\n";
    const std::string file1 = "#include <vector>\n\n" + fn + "int x = max(1, 2);\n";
    const std::string file2 = "/* Sums a vector.\n   Empty gives 0. */\nlong sum(const std::vector<int>& v) {\n"
                              "  long s = 0;\n  for (int x : v) { s += x; }\n  return s;\n}\n";
    // Llama-3's pre-tokenizer keeps a newline with the punctuation before it: "{\n" is one token,
    // which straddles the body's first byte and so stays in the prefix (the side it starts on).
    const std::string nl = std::string(style) == "llama3-style" ? "\n" : "";
    const std::string body_nl = nl.empty() ? "\n" : "";
    const std::vector<std::pair<Expected, Expected>> cases{
        {{file1, "#include <vector>\n\n// Returns the larger of a and b.\nint max(int a, int b) {" + nl,
          body_nl + "  return a > b ? a : b;\n", "}\nint x = max(1, 2);\n"},
         {file1, "#include <vector>\n\n", "// Returns the larger of a and b.\n",
          "int max(int a, int b) {\n  return a > b ? a : b;\n}\nint x = max(1, 2);\n"}},
        {{file2, "/* Sums a vector.\n   Empty gives 0. */\nlong sum(const std::vector<int>& v) {" + nl,
          body_nl + "  long s = 0;\n  for (int x : v) { s += x; }\n  return s;\n", "}\n"},
         {file2, "", "/* Sums a vector.\n   Empty gives 0. */\n",
          "long sum(const std::vector<int>& v) {\n  long s = 0;\n  for (int x : v) { s += x; }\n  return s;\n}\n"}}};
    for (const auto& [to_code, to_doc] : cases) {
      const auto doc = tok.encode_document(to_code.text);
      const std::span<const std::int32_t> body(doc.data() + 1, doc.size() - 2);
      const auto ends = token_end_offsets(tok, body);
      REQUIRE(ends.back() == to_code.text.size());
      CHECK(body.size() < to_code.text.size());  // real merges, not one token per byte
      const auto s = structured_fim(to_code.text, ends);
      REQUIRE(s.has_value());
      check_split(tok, doc, s->doc_to_code, to_code);
      check_split(tok, doc, s->code_to_doc, to_doc);
      // fim_transform lays the same split out as PSM: BOS PRE prefix SUF suffix MID middle EOS.
      Rng rng(5);
      const auto f = fim_transform(doc, tok.special(), FimConfig{1.0, 1.0, 0.0}, rng, s);
      REQUIRE(f.kind == FimKind::doc_to_code);
      std::vector<std::int32_t> expected{doc.front(), tok.special().fim_prefix};
      expected.insert(expected.end(), body.begin(), body.begin() + static_cast<std::ptrdiff_t>(s->doc_to_code.begin));
      expected.push_back(tok.special().fim_suffix);
      expected.insert(expected.end(), body.begin() + static_cast<std::ptrdiff_t>(s->doc_to_code.end), body.end());
      expected.push_back(tok.special().fim_middle);
      expected.insert(expected.end(), body.begin() + static_cast<std::ptrdiff_t>(s->doc_to_code.begin),
                      body.begin() + static_cast<std::ptrdiff_t>(s->doc_to_code.end));
      expected.push_back(tok.special().eos);
      CHECK(f.tokens == expected);
    }
  }
}
