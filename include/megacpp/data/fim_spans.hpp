// megacpp/data/fim_spans.hpp: where structured FIM cuts a C/C++ document, in bytes and in tokens.
//
// Structured FIM (docs/recipe.md "Fill in the middle") needs a comment that documents a function
// and that function's body. find_doc_and_body() finds, in the text, the first comment block
// (consecutive `//` lines or one `/* */` block, each starting a line) that is followed by a
// declaration containing `(` and ending in `{` before any `;`, and the brace that closes it
// (string and character literals and comments inside are skipped). The byte spans become token
// spans through the tokenizer's byte offsets: token i of the body covers bytes
// [end[i-1], end[i]), and a token that straddles a span's edge belongs to the side it starts on.
// This works for any tokenizer whose tokens concatenate to the text (ByteTokenizer, and a
// byte-level BpeTokenizer without a text-dropping Split step); otherwise no structured split is used.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "megacpp/data/fim.hpp"

namespace megacpp::data {

/// Byte spans of a documented function: the comment [doc_begin, doc_end) (including its final
/// newline) and the body [body_begin, body_end) strictly between the braces.
struct DocAndBody {
  std::size_t doc_begin = 0;   ///< first byte of the comment block (its indentation included)
  std::size_t doc_end = 0;     ///< one past the comment block's last newline
  std::size_t body_begin = 0;  ///< one past the function's `{`
  std::size_t body_end = 0;    ///< the function's closing `}`
};

namespace detail {
// One past a string or character literal starting at `i` (text[i] is the quote), or text.size().
inline std::size_t skip_literal(std::string_view text, std::size_t i) {
  const char quote = text[i];
  for (++i; i < text.size() && text[i] != quote && text[i] != '\n'; ++i)
    if (text[i] == '\\') ++i;
  return i < text.size() ? i + 1 : text.size();
}

// One past a comment starting at `i` ("//" to the end of the line, or "/* ... */"), or npos for
// an unterminated block comment.
inline std::size_t skip_comment(std::string_view text, std::size_t i) {
  if (text[i + 1] == '/') {
    const std::size_t nl = text.find('\n', i);
    return nl == std::string_view::npos ? text.size() : nl + 1;
  }
  const std::size_t close = text.find("*/", i + 2);
  return close == std::string_view::npos ? std::string_view::npos : close + 2;
}

inline bool comment_at(std::string_view text, std::size_t i) {
  return i + 1 < text.size() && text[i] == '/' && (text[i + 1] == '/' || text[i + 1] == '*');
}
}  // namespace detail

/// The first documented function of `text` (see the file comment), or nullopt.
inline std::optional<DocAndBody> find_doc_and_body(std::string_view text) {
  std::size_t line = 0;
  while (line < text.size()) {
    // A comment block starting at this line (after spaces and tabs)?
    std::size_t i = text.find_first_not_of(" \t", line);
    if (i == std::string_view::npos) break;
    if (!detail::comment_at(text, i)) {
      const std::size_t nl = text.find('\n', i);
      if (nl == std::string_view::npos) break;
      line = nl + 1;
      continue;
    }
    DocAndBody span;
    span.doc_begin = line;
    std::size_t end = line;
    while (true) {  // consecutive comment lines form one block
      const std::size_t j = text.find_first_not_of(" \t", end);
      if (j == std::string_view::npos || !detail::comment_at(text, j)) break;
      std::size_t k = detail::skip_comment(text, j);
      if (k == std::string_view::npos) return std::nullopt;  // unterminated block comment
      if (k < text.size() && text[k - 1] != '\n') {
        const std::size_t nl = text.find('\n', k);
        if (nl == std::string_view::npos || text.find_first_not_of(" \t\r", k) < nl) break;  // code after */
        k = nl + 1;
      }
      end = k;
    }
    if (end == line) {  // a comment that does not end its line: not a documentation block
      const std::size_t nl = text.find('\n', i);
      if (nl == std::string_view::npos) break;
      line = nl + 1;
      continue;
    }
    span.doc_end = end;
    // The declaration after it: up to the first `{` (a definition) or `;` (not one).
    std::size_t k = end;
    bool saw_paren = false;
    while (k < text.size() && text[k] != '{' && text[k] != ';' && !detail::comment_at(text, k)) {
      saw_paren |= text[k] == '(';
      ++k;
    }
    if (k < text.size() && text[k] == '{' && saw_paren && text.find_first_not_of(" \t\r\n", end) < k) {
      int depth = 0;
      std::size_t c = k;
      while (c < text.size()) {
        const char ch = text[c];
        if (ch == '"' || ch == '\'') { c = detail::skip_literal(text, c); continue; }
        if (detail::comment_at(text, c)) {
          c = detail::skip_comment(text, c);
          if (c == std::string_view::npos) return std::nullopt;
          continue;
        }
        if (ch == '{') ++depth;
        if (ch == '}' && --depth == 0) break;
        ++c;
      }
      if (c < text.size() && c > k + 1) {
        span.body_begin = k + 1;
        span.body_end = c;
        return span;
      }
    }
    line = end;  // try the next comment block
  }
  return std::nullopt;
}

/// Byte end of each token of `body` (ids without BOS and EOS): the running sum of the lengths of
/// tokenizer.decode({id}). Works for any tokenizer with decode(std::vector<std::int32_t>).
template <class Tokenizer>
std::vector<std::size_t> token_end_offsets(const Tokenizer& tokenizer, std::span<const std::int32_t> body) {
  std::vector<std::size_t> ends;
  ends.reserve(body.size());
  std::size_t at = 0;
  for (const std::int32_t id : body) {
    at += tokenizer.decode(std::vector<std::int32_t>{id}).size();
    ends.push_back(at);
  }
  return ends;
}

/// The structured splits of a document whose body tokens end at `token_ends` (token_end_offsets)
/// and whose text is `text`; nullopt when the text has no documented function, when the tokens do
/// not tile the text exactly, or when a middle would hold no token.
inline std::optional<StructuredFim> structured_fim(std::string_view text, std::span<const std::size_t> token_ends) {
  if (token_ends.empty() || token_ends.back() != text.size()) return std::nullopt;
  const auto span = find_doc_and_body(text);
  if (!span) return std::nullopt;
  // Token index of byte p: the number of tokens that start before p (token i starts at end[i-1]).
  const auto token_at = [&](std::size_t p) {
    std::size_t n = 0;
    while (n < token_ends.size() && (n == 0 ? 0 : token_ends[n - 1]) < p) ++n;
    return n;
  };
  const StructuredFim s{{token_at(span->body_begin), token_at(span->body_end)},
                        {token_at(span->doc_begin), token_at(span->doc_end)}};
  if (s.doc_to_code.begin >= s.doc_to_code.end || s.code_to_doc.begin >= s.code_to_doc.end) return std::nullopt;
  return s;
}

}  // namespace megacpp::data
