// megacpp/eval/code_bleu.hpp: the n-gram components of CodeBLEU for C++ (BLEU-4 and the
// keyword-weighted n-gram match), computed over C++ tokens.
//
// CodeBLEU (Ren et al. 2020, "CodeBLEU: a Method for Automatic Evaluation of Code Synthesis",
// arXiv:2009.10297, sec. 3) is
//
//   CodeBLEU = 0.25 BLEU + 0.25 BLEU_weight + 0.25 Match_ast + 0.25 Match_df
//
// The first two terms are computed here. BLEU is corpus BLEU-4 (Papineni et al. 2002): clipped
// n-gram precisions p_n summed over every (candidate, reference) pair, BP = exp(1 - r / c) when
// the candidates are shorter than the references (r, c: total token counts), and
// BLEU = BP exp(sum_n 1/4 log p_n); no smoothing, so a corpus with no matching 4-gram scores 0.
// BLEU_weight is the same with the unigram counts weighted: a C++ keyword weighs 1, any other
// token 0.2 (the paper: keywords weigh 5 times the other tokens, on unigrams only; CodeXGLUE's
// reference code keeps orders 2-4 unweighted, as here).
// Match_ast and Match_df need a C++ parser and a data-flow graph; they are not computed here, and
// no combined CodeBLEU is claimed from the two terms that are (callers report them as null).
//
// Tokens: comments are dropped (CodeBLEU removes them before scoring), identifiers and keywords,
// numbers, string and character literals (with escapes) and C++ punctuators (longest match among
// the common multi-character ones) are one token each.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/core/error.hpp"

namespace megacpp::eval {

/// The C++20 keywords (ISO/IEC 14882:2020 [lex.key]), weighted 1 by weighted_ngram_match.
inline const std::set<std::string, std::less<>>& cpp_keywords() {
  static const std::set<std::string, std::less<>> keywords = {
      "alignas", "alignof", "asm", "auto", "bool", "break", "case", "catch", "char", "char8_t", "char16_t", "char32_t",
      "class", "concept", "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
      "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum",
      "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long",
      "mutable", "namespace", "new", "noexcept", "nullptr", "operator", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast",
      "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename",
      "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while"};
  return keywords;
}

/// Splits C++ source into tokens (see the header comment); comments and whitespace are dropped.
/// Never throws on malformed code: an unterminated literal or comment runs to the end.
inline std::vector<std::string> cpp_tokens(std::string_view s) {
  static constexpr std::array<std::string_view, 23> kPunct = {
      "<<=", ">>=", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=",
      "*=", "/=", "%=", "&=", "|="};
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (s.substr(i, 2) == "//") {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.substr(i, 2) == "/*") {
      const std::size_t end = s.find("*/", i + 2);
      i = end == std::string_view::npos ? s.size() : end + 2;
    } else if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < s.size() && s[j] != c && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      j = std::min(s.size(), j + 1);
      out.emplace_back(s.substr(i, j - i));
      i = j;
    } else if (ident(c)) {  // identifiers, keywords and numbers (1e-5, 0x1F, 1'000, 2.5f)
      std::size_t j = i;
      const bool number = std::isdigit(static_cast<unsigned char>(c));
      while (j < s.size() && (ident(s[j]) || (number && (s[j] == '.' || s[j] == '\'' ||
                                                         ((s[j] == '-' || s[j] == '+') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))))
        ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    } else {
      std::size_t len = 1;
      for (const std::string_view p : kPunct)
        if (s.substr(i, p.size()) == p) {
          len = p.size();
          break;
        }
      out.emplace_back(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

/// One candidate and the reference it is scored against (token lists from cpp_tokens).
struct BleuPair {
  std::vector<std::string> candidate;  ///< the generated code's tokens
  std::vector<std::string> reference;  ///< the reference solution's tokens
};

namespace detail {
// Corpus BLEU-4 with unigram weights `weight(token)` (1 everywhere gives plain BLEU).
template <class Weight>
double corpus_bleu_weighted(const std::vector<BleuPair>& pairs, Weight weight) {
  constexpr int kOrders = 4;
  std::array<double, kOrders> matched{}, total{};
  double candidate_length = 0, reference_length = 0;
  for (const BleuPair& pair : pairs) {
    candidate_length += static_cast<double>(pair.candidate.size());
    reference_length += static_cast<double>(pair.reference.size());
    for (int n = 1; n <= kOrders; ++n) {
      std::map<std::vector<std::string>, double> reference_counts;
      const auto un = static_cast<std::size_t>(n);
      for (std::size_t i = 0; i + un <= pair.reference.size(); ++i)
        reference_counts[{pair.reference.begin() + static_cast<std::ptrdiff_t>(i),
                          pair.reference.begin() + static_cast<std::ptrdiff_t>(i + un)}] += 1;
      std::map<std::vector<std::string>, double> candidate_counts;
      for (std::size_t i = 0; i + un <= pair.candidate.size(); ++i)
        candidate_counts[{pair.candidate.begin() + static_cast<std::ptrdiff_t>(i),
                          pair.candidate.begin() + static_cast<std::ptrdiff_t>(i + un)}] += 1;
      for (const auto& [gram, count] : candidate_counts) {
        const double w = n == 1 ? weight(gram[0]) : 1.0;
        const auto it = reference_counts.find(gram);
        matched[static_cast<std::size_t>(n - 1)] += w * std::min(count, it == reference_counts.end() ? 0.0 : it->second);
        total[static_cast<std::size_t>(n - 1)] += w * count;
      }
    }
  }
  double log_sum = 0;
  for (int n = 0; n < kOrders; ++n) {
    if (matched[static_cast<std::size_t>(n)] <= 0 || total[static_cast<std::size_t>(n)] <= 0) return 0.0;
    log_sum += 0.25 * std::log(matched[static_cast<std::size_t>(n)] / total[static_cast<std::size_t>(n)]);
  }
  const double brevity = candidate_length < reference_length ? std::exp(1.0 - reference_length / candidate_length) : 1.0;
  return brevity * std::exp(log_sum);
}
}  // namespace detail

/// Corpus BLEU-4 of the candidates against their references (CodeBLEU's n-gram match), in [0, 1].
inline double ngram_match(const std::vector<BleuPair>& pairs) {
  return detail::corpus_bleu_weighted(pairs, [](const std::string&) { return 1.0; });
}

/// CodeBLEU's weighted n-gram match: corpus BLEU-4 whose unigram counts weigh `keyword_weight`
/// for a C++ keyword and `other_weight` for any other token (1 and 0.2: keywords 5 times).
inline double weighted_ngram_match(const std::vector<BleuPair>& pairs, double keyword_weight = 1.0,
                                   double other_weight = 0.2) {
  check(keyword_weight > 0 && other_weight > 0, "weighted_ngram_match", "token weights must be positive, got ",
        keyword_weight, " and ", other_weight);
  const auto& keywords = cpp_keywords();
  return detail::corpus_bleu_weighted(
      pairs, [&](const std::string& token) { return keywords.count(token) ? keyword_weight : other_weight; });
}

}  // namespace megacpp::eval
