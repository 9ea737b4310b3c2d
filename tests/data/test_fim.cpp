// Byte tokenizer and fill-in-the-middle: PSM layout, structured splits (doc -> code, code -> doc) found in
// the text and mapped to tokens, the recipe's 40/40/20 fractions, and the loss mask (sentinel targets only).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"
#include "megacpp/megacpp.hpp"

using namespace megacpp;
using namespace megacpp::data;

TEST_CASE("ByteTokenizer: BOS + bytes + EOS, exact round trip of any bytes", "[data][fim]") {
  ByteTokenizer tok;
  const std::string text = std::string("int main() {}\n") + '\xff' + '\0';
  const auto ids = tok.encode_document(text);
  CHECK(ids.front() == tok.special().bos);
  CHECK(ids.back() == tok.special().eos);
  CHECK(ids.size() == text.size() + 2);
  CHECK(tok.decode(std::vector<std::int32_t>(ids.begin() + 1, ids.end() - 1)) == text);
  CHECK(tok.decode({256, 97, 257}) == "<BOS>a<EOS>");
  CHECK_THROWS_WITH(tok.decode({300}), Catch::Matchers::Contains("id 300 outside the vocabulary of 261"));
}

namespace {
// prefix, suffix and middle of a PSM document, as token vectors (REQUIREs the layout).
struct Psm {
  std::vector<std::int32_t> prefix, suffix, middle;
};
Psm split_psm(const std::vector<std::int32_t>& f, const SpecialTokens& sp) {
  REQUIRE(f.size() >= 5);
  REQUIRE(f[0] == sp.bos);
  REQUIRE(f[1] == sp.fim_prefix);
  REQUIRE(f.back() == sp.eos);
  const auto suf = std::find(f.begin() + 2, f.end(), sp.fim_suffix);
  const auto mid = std::find(suf, f.end(), sp.fim_middle);
  REQUIRE((suf < mid && mid != f.end()));
  return {{f.begin() + 2, suf}, {suf + 1, mid}, {mid + 1, f.end() - 1}};
}

const char* kDocumented =
    "#include <cstdio>\n"
    "// Adds two ints.\n"
    "int add(int a, int b) {\n"
    "  return a + b;\n"
    "}\n"
    "int main() { return add(1, 2); }\n";
}  // namespace

TEST_CASE("fim_transform: PSM keeps every body token once, rate 0 keeps documents", "[data][fim]") {
  ByteTokenizer tok;
  const auto& sp = tok.special();
  const auto doc = tok.encode_document("abcdefghij");
  Rng rng(3);
  const auto same = fim_transform(doc, sp, FimConfig{0.0, 0.0}, rng);
  CHECK(same.tokens == doc);
  CHECK(same.kind == FimKind::plain);
  for (int trial = 0; trial < 50; ++trial) {
    const auto f = fim_transform(doc, sp, FimConfig{1.0, 0.0}, rng);
    CHECK(f.kind == FimKind::random);
    REQUIRE(f.tokens.size() == doc.size() + 3);
    const Psm p = split_psm(f.tokens, sp);
    std::vector<std::int32_t> body = p.prefix;  // prefix + middle + suffix == body
    body.insert(body.end(), p.middle.begin(), p.middle.end());
    body.insert(body.end(), p.suffix.begin(), p.suffix.end());
    CHECK(body == std::vector<std::int32_t>(doc.begin() + 1, doc.end() - 1));
  }
}

TEST_CASE("find_doc_and_body: the first comment followed by a function definition", "[data][fim]") {
  const std::string text = kDocumented;
  const auto span = find_doc_and_body(text);
  REQUIRE(span.has_value());
  CHECK(text.substr(span->doc_begin, span->doc_end - span->doc_begin) == "// Adds two ints.\n");
  CHECK(text.substr(span->body_begin, span->body_end - span->body_begin) == "\n  return a + b;\n");
  // No comment, a comment before a declaration only, an unterminated block: nothing.
  CHECK_FALSE(find_doc_and_body("int f() { return 1; }\n").has_value());
  CHECK_FALSE(find_doc_and_body("// a global\nint x;\n").has_value());
  CHECK_FALSE(find_doc_and_body("/* never closed\nint f() { return 1; }\n").has_value());
  CHECK_FALSE(find_doc_and_body("// empty body\nvoid f() {}\n").has_value());
  // A declaration comment is skipped for the next documented function; a block comment and
  // consecutive // lines form one block; braces inside strings, characters and comments do not count.
  const std::string two = "// a global\nint x;\n/* Returns the brace.\n * Really. */\n"
                          "const char* g(int n) {\n  if (n) { return \"}\"; }  // }\n  return \"{\";\n}\nint y;\n";
  const auto g = find_doc_and_body(two);
  REQUIRE(g.has_value());
  CHECK(two.substr(g->doc_begin, g->doc_end - g->doc_begin) == "/* Returns the brace.\n * Really. */\n");
  CHECK(two.substr(g->body_begin, g->body_end - g->body_begin) == "\n  if (n) { return \"}\"; }  // }\n  return \"{\";\n");
  const std::string lines = "  // one\n  // two\n  void h(){ y(); }\n";
  const auto h = find_doc_and_body(lines);
  REQUIRE(h.has_value());
  CHECK(lines.substr(h->doc_begin, h->doc_end - h->doc_begin) == "  // one\n  // two\n");
  CHECK(lines.substr(h->body_begin, h->body_end - h->body_begin) == " y(); ");
}

TEST_CASE("structured FIM, byte tokenizer: doc -> code and code -> doc on a hand-made file", "[data][fim]") {
  ByteTokenizer tok;
  const auto& sp = tok.special();
  const std::string text = kDocumented;
  const auto doc = tok.encode_document(text);
  const std::span<const std::int32_t> body(doc.data() + 1, doc.size() - 2);
  const auto structured = structured_fim(text, token_end_offsets(tok, body));
  REQUIRE(structured.has_value());
  std::map<FimKind, int> seen;
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const auto f = fim_transform(doc, sp, FimConfig{1.0, 1.0, 0.5}, rng, structured);
    ++seen[f.kind];
    const Psm p = split_psm(f.tokens, sp);
    if (f.kind == FimKind::doc_to_code) {
      CHECK(tok.decode(p.prefix) == "#include <cstdio>\n// Adds two ints.\nint add(int a, int b) {");
      CHECK(tok.decode(p.middle) == "\n  return a + b;\n");
      CHECK(tok.decode(p.suffix) == "}\nint main() { return add(1, 2); }\n");
    } else {
      REQUIRE(f.kind == FimKind::code_to_doc);
      CHECK(tok.decode(p.prefix) == "#include <cstdio>\n");
      CHECK(tok.decode(p.middle) == "// Adds two ints.\n");
      CHECK(tok.decode(p.suffix) == "int add(int a, int b) {\n  return a + b;\n}\nint main() { return add(1, 2); }\n");
    }
  }
  CHECK(seen[FimKind::doc_to_code] > 10);  // both directions, roughly even
  CHECK(seen[FimKind::code_to_doc] > 10);
  // Without a documented function the structured share falls back to random cuts.
  const auto plain = tok.encode_document("int f() { return 1; }\n");
  const std::span<const std::int32_t> plain_body(plain.data() + 1, plain.size() - 2);
  CHECK_FALSE(structured_fim("int f() { return 1; }\n", token_end_offsets(tok, plain_body)).has_value());
  CHECK(fim_transform(plain, sp, FimConfig{1.0, 1.0, 0.5}, rng, std::nullopt).kind == FimKind::random);
}

TEST_CASE("structured_fim: a token straddling a span edge stays on the side it starts on", "[data][fim]") {
  const std::string text = "// x\nf() {\n  y;\n}\n";  // doc [0, 5), body [10, 16)
  // tokens: "// x\n" | "f() {\n" | "  y;" | "\n" | "}\n"  (the second straddles the body's start)
  const std::vector<std::size_t> ends{5, 11, 15, 16, 18};
  const auto s = structured_fim(text, ends);
  REQUIRE(s.has_value());
  CHECK(s->code_to_doc.begin == 0);
  CHECK(s->code_to_doc.end == 1);
  CHECK(s->doc_to_code.begin == 2);  // "f() {\n" starts before the body: prefix
  CHECK(s->doc_to_code.end == 4);    // "\n" at 15 is the body's last byte; "}\n" starts at body_end 16
  // Tokens that do not tile the text (a dropped byte): no structured split.
  CHECK_FALSE(structured_fim(text, std::vector<std::size_t>{5, 11, 15, 17}).has_value());
}

TEST_CASE("fim_transform: the recipe's 40/40/10/10 and FIM at rate 0.5 over 10,000 documents", "[data][fim]") {
  ByteTokenizer tok;
  const auto& sp = tok.special();
  const std::string text = kDocumented;
  const auto doc = tok.encode_document(text);
  const std::span<const std::int32_t> body(doc.data() + 1, doc.size() - 2);
  const auto structured = structured_fim(text, token_end_offsets(tok, body));
  REQUIRE(structured.has_value());
  const auto fractions = [&](const FimConfig& config, std::uint64_t seed) {
    std::map<FimKind, double> f;
    Rng rng(seed);
    constexpr int kDocs = 10000;
    for (int i = 0; i < kDocs; ++i) f[fim_transform(doc, sp, config, rng, structured).kind] += 1.0 / kDocs;
    return f;
  };
  auto f = fractions(FimConfig::recipe(), 11);
  CHECK(f[FimKind::plain] == Approx(0.4).margin(0.01));
  CHECK(f[FimKind::random] == Approx(0.4).margin(0.01));
  CHECK(f[FimKind::doc_to_code] == Approx(0.1).margin(0.01));
  CHECK(f[FimKind::code_to_doc] == Approx(0.1).margin(0.01));
  f = fractions(FimConfig::rate_half(), 12);
  CHECK(f[FimKind::plain] == Approx(0.5).margin(0.01));
  CHECK(f[FimKind::random] == Approx(1.0 / 3).margin(0.01));
  CHECK(f[FimKind::doc_to_code] + f[FimKind::code_to_doc] == Approx(1.0 / 6).margin(0.01));
}

TEST_CASE("fim_loss_mask: only the sentinel targets are masked", "[data][fim]") {
  const SpecialTokens sp;
  // BOS <PRE> p <SUF> s <MID> m EOS BOS x y
  const std::vector<std::int32_t> stream{sp.bos, sp.fim_prefix, 'p', sp.fim_suffix, 's', sp.fim_middle, 'm', sp.eos, sp.bos, 'x', 'y'};
  const std::vector<std::int32_t> targets(stream.begin() + 1, stream.end());
  std::vector<float> mask(targets.size());
  fim_loss_mask(targets.data(), targets.size(), sp, mask.data());
  //           ->PRE  ->p  ->SUF ->s  ->MID ->m  ->EOS ->BOS ->x ->y
  CHECK(mask == std::vector<float>{0, 1, 0, 1, 0, 1, 1, 1, 1, 1});
}

TEST_CASE("loader: the FIM mask is derived per row, including rows that start mid-example", "[data][fim]") {
  megacpp::testing::TempDir dir;
  const SpecialTokens sp;
  std::vector<std::uint32_t> stream;
  for (int rep = 0; rep < 4; ++rep)
    for (std::int32_t t : std::initializer_list<std::int32_t>{sp.bos, sp.fim_prefix, 'a', 'b', sp.fim_suffix, 'c', sp.fim_middle, 'd', 'e', sp.eos})
      stream.push_back(static_cast<std::uint32_t>(t));
  write_shard(dir / "fim.bin", stream);
  ShardLoader loader(list_shards(dir.path), 2, 5, ByteTokenizer::kVocab);
  loader.enable_fim_mask(sp);
  const auto batch = loader.next<float, Cpu>();
  // row 0 inputs: BOS PRE a b SUF -> targets PRE a b SUF c: the two sentinels masked
  // row 1 inputs: c MID d e EOS   -> targets MID d e EOS BOS: MID masked
  CHECK(batch.loss_mask_host == std::vector<float>{0, 1, 1, 0, 1, 0, 1, 1, 1, 1});
}

TEST_CASE("find_doc_and_body: random C-like text never breaks its invariants", "[data][fim]") {
  // Pieces of C (comments, signatures, braces, literals holding braces, unterminated ones) and single characters.
  const std::vector<std::string> pieces{"// c\n", "/* d */\n", "/* e", "*/", "f(a) ", "{", "}", "\"}\"", "'{'", "\"",
                                        "a;", "\n", " ", "/", "*", "(", "\\"};
  Rng rng(2024);
  int found = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    const auto n = rng.below(24);
    for (std::uint64_t i = 0; i < n; ++i) text += pieces[rng.below(pieces.size())];
    const auto span = find_doc_and_body(text);
    if (!span) continue;
    ++found;
    INFO(text);
    REQUIRE(span->doc_begin < span->doc_end);
    REQUIRE(span->doc_end < span->body_begin);
    REQUIRE(span->body_begin < span->body_end);
    REQUIRE(span->body_end < text.size());
    CHECK(text[span->body_begin - 1] == '{');
    CHECK(text[span->body_end] == '}');
  }
  CHECK(found > 0);
}
