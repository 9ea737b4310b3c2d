/// \file
/// megacpp/data/bpe_pieces.hpp: the parts of byte-level BPE that need no JSON: GPT-2's byte
/// alphabet, UTF-8 walking and the merging of one word by rank (the pre-tokenizer split is
/// megacpp/data/pre_tokenizer.hpp).
/// BpeTokenizer (megacpp/data/bpe_tokenizer.hpp, which needs nlohmann_json) is built on them;
/// the formulas and their sources are described there.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "megacpp/io/utf8.hpp"

namespace megacpp::data {

namespace detail {

// GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py; HF pre_tokenizers/byte_level.rs
// bytes_char): the 188 printable bytes ! .. ~, U+00A1 .. U+00AC and U+00AE .. U+00FF stand for
// themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) get U+0100 + n in byte
// order. So space is "Ġ" (U+0120), "\n" is "Ċ" (U+010A), and every token string is printable.
inline const std::array<char32_t, 256>& gpt2_byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : shifted++;
    }
    return t;
  }();
  return table;
}

// The inverse of gpt2_byte_to_unicode: the byte a code point stands for, or -1 when the code
// point is not one of the 256 (the alphabet ends at U+0143).
inline int gpt2_unicode_to_byte(char32_t cp) {
  static const std::array<std::int16_t, 0x144> table = [] {
    std::array<std::int16_t, 0x144> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[gpt2_byte_to_unicode()[static_cast<std::size_t>(b)]] = static_cast<std::int16_t>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// Reads the code point starting at s[i] and advances i past it; false on malformed UTF-8
// (nlohmann::json already rejects such strings, this keeps the decoder safe on its own).
inline bool next_utf8(std::string_view s, std::size_t& i, char32_t& cp) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  const std::size_t len = lead < 0x80            ? 1
                          : (lead >> 5) == 0x6    ? 2
                          : (lead >> 4) == 0xE    ? 3
                          : (lead >> 3) == 0x1E   ? 4
                                                  : 0;
  if (len == 0 || i + len > s.size()) return false;
  cp = len == 1 ? lead : len == 2 ? (lead & 0x1Fu) : len == 3 ? (lead & 0x0Fu) : (lead & 0x07u);
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) >> 6) != 0x2) return false;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  i += len;
  return true;
}

// "Ġint" -> " int"; nullopt when a character lies outside the ByteLevel alphabet.
inline std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  std::string bytes;
  std::size_t i = 0;
  char32_t cp = 0;
  while (i < token.size()) {
    if (!next_utf8(token, i, cp)) return std::nullopt;
    const int b = gpt2_unicode_to_byte(cp);
    if (b < 0) return std::nullopt;
    bytes += static_cast<char>(b);
  }
  return bytes;
}

// " int" -> "Ġint": how the vocab writes a byte string.
inline std::string bytes_to_byte_level(std::string_view bytes) {
  std::string token;
  for (const char c : bytes) io::append_utf8(token, gpt2_byte_to_unicode()[static_cast<unsigned char>(c)]);
  return token;
}

// Hash for maps keyed by std::string that are looked up by std::string_view without a copy.
struct StringViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// A merge rule: the pair (left, right) becomes token `id`; lower rank merges first.
struct BpeMerge {
  std::int32_t rank;
  std::int32_t id;
};

inline std::uint64_t bpe_pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

// BPE on one word, in place: `ids` holds its byte tokens on entry and its tokens on exit.
// Semantics: merge the lowest-ranked adjacent pair (leftmost on ties), one at a time, until no
// pair has a rank (tiktoken `_byte_pair_merge`; encoder.py `bpe()` agrees on trained tables).
// That naive loop is O(n^2) per word, and one pre-token can be a 100 KB run of '=' in a source
// file, so this is O(n log n) with a priority queue keyed (rank, position) as HF models/bpe/
// word.rs merge_all: a queued pair is stale when a neighbour merged since; it is skipped, and the
// pair that merge formed was queued then with its own rank. tests/data/test_bpe_tokenizer.cpp
// keeps the naive loop and compares the two on random merge tables.
inline void bpe_merge_word(std::vector<std::int32_t>& ids, const std::unordered_map<std::uint64_t, BpeMerge>& merges) {
  const std::size_t n = ids.size();
  if (n < 2) return;
  const std::size_t none = n;
  std::vector<std::size_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? none : i - 1;
    next[i] = i + 1;
  }
  struct Candidate {
    std::int32_t rank;
    std::size_t pos;
    std::int32_t id;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto push_pair = [&](std::size_t left) {
    if (left == none || next[left] == none) return;
    const auto it = merges.find(bpe_pair_key(ids[left], ids[next[left]]));
    if (it != merges.end()) queue.push(Candidate{it->second.rank, left, it->second.id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.pos] || next[c.pos] == none) continue;
    const std::size_t right = next[c.pos];
    const auto it = merges.find(bpe_pair_key(ids[c.pos], ids[right]));
    if (it == merges.end() || it->second.rank != c.rank) continue;  // stale: the pair changed
    ids[c.pos] = c.id;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[right] != none) prev[next[right]] = c.pos;
    push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i != none; i = next[i]) ids[out++] = ids[i];  // position 0 is never merged away
  ids.resize(out);
}

}  // namespace detail

}  // namespace megacpp::data
