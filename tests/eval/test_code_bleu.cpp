// CodeBLEU's n-gram components on hand-made examples: the C++ tokens, BLEU-4 with its brevity
// penalty, and the keyword-weighted unigram precision.
#include <catch2/catch.hpp>

#include <cmath>

#include "megacpp/eval/code_bleu.hpp"

using namespace megacpp::eval;
using Tokens = std::vector<std::string>;

TEST_CASE("C++ tokens: punctuators, literals, numbers, and no comments", "[eval][bleu]") {
  CHECK(cpp_tokens("x+=1; // note\n s = \"a b\"; /* gone */ p->q") ==
        Tokens{"x", "+=", "1", ";", "s", "=", "\"a b\"", ";", "p", "->", "q"});
  CHECK(cpp_tokens("float f = 1e-5f; char c = '\\'';") == Tokens{"float", "f", "=", "1e-5f", ";", "char", "c", "=", "'\\''", ";"});
  CHECK(cpp_tokens("std::vector<int> v{1'000};") ==
        Tokens{"std", "::", "vector", "<", "int", ">", "v", "{", "1'000", "}", ";"});
  CHECK(cpp_tokens("\"unterminated").size() == 1);
  CHECK(cpp_tokens("").empty());
}

TEST_CASE("BLEU-4: identical code scores 1, a missing 4-gram 0", "[eval][bleu]") {
  const Tokens code = cpp_tokens("int add(int a, int b) { return a + b; }");
  CHECK(ngram_match({{code, code}}) == Approx(1.0));
  CHECK(weighted_ngram_match({{code, code}}) == Approx(1.0));
  CHECK(ngram_match({{Tokens{"a", "b", "c"}, Tokens{"a", "b", "c"}}}) == 0.0);  // no 4-gram at all
  CHECK(ngram_match({{Tokens{"x", "y", "z", "w"}, Tokens{"a", "b", "c", "d"}}}) == 0.0);
}

TEST_CASE("BLEU-4: brevity penalty exp(1 - r / c)", "[eval][bleu]") {
  // every n-gram of the candidate matches; 4 candidate tokens against 5 reference tokens
  CHECK(ngram_match({{Tokens{"a", "b", "c", "d"}, Tokens{"a", "b", "c", "d", "e"}}}) == Approx(std::exp(1.0 - 5.0 / 4.0)));
  // a longer candidate is not penalised for length (precision only)
  CHECK(ngram_match({{Tokens{"a", "b", "c", "d", "e"}, Tokens{"a", "b", "c", "d"}}}) ==
        Approx(std::pow(4.0 / 5 * 3.0 / 4 * 2.0 / 3 * 1.0 / 2, 0.25)));
}

TEST_CASE("BLEU-4 and weighted n-gram match by hand", "[eval][bleu]") {
  // return a + b + c ;  against  return a + b + d ;  (7 tokens each, BP = 1)
  const Tokens candidate = cpp_tokens("return a + b + c;"), reference = cpp_tokens("return a + b + d;");
  REQUIRE(candidate.size() == 7);
  // p1 = 6/7, p2 = 4/6, p3 = 3/5, p4 = 2/4
  const double bleu = std::pow(6.0 / 7 * 4.0 / 6 * 3.0 / 5 * 2.0 / 4, 0.25);
  CHECK(ngram_match({{candidate, reference}}) == Approx(bleu).epsilon(1e-12));
  // weighted unigrams: "return" weighs 1, the other six 0.2 each; all but "c" match:
  // p1 = (1 + 5 x 0.2) / (1 + 6 x 0.2) = 2.0 / 2.2
  const double weighted = std::pow(2.0 / 2.2 * 4.0 / 6 * 3.0 / 5 * 2.0 / 4, 0.25);
  CHECK(weighted_ngram_match({{candidate, reference}}) == Approx(weighted).epsilon(1e-12));
  // a mismatch on the keyword weighs five times as much
  const Tokens keyword_off = cpp_tokens("throw a + b + d;");
  // p1 = (6 x 0.2) / 2.2; the n-grams starting at "throw" miss: p2 = 5/6, p3 = 4/5, p4 = 3/4
  const double keyword_weighted = std::pow(1.2 / 2.2 * 5.0 / 6 * 4.0 / 5 * 3.0 / 4, 0.25);
  CHECK(weighted_ngram_match({{keyword_off, reference}}) == Approx(keyword_weighted).epsilon(1e-12));
}

TEST_CASE("BLEU-4 is a corpus score: counts summed over pairs", "[eval][bleu]") {
  const Tokens a{"a", "b", "c", "d"};
  const Tokens b{"w", "x", "y", "z"};
  // pair 2 matches nothing, pair 1 everything: p_n = matched_n / total_n summed over both
  const double expected = std::pow(4.0 / 8 * 3.0 / 6 * 2.0 / 4 * 1.0 / 2, 0.25);
  CHECK(ngram_match({{a, a}, {b, a}}) == Approx(expected).epsilon(1e-12));
  CHECK_THROWS(weighted_ngram_match({{a, a}}, 0.0, 0.2));
}
