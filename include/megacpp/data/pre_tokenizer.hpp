/// \file
/// megacpp/data/pre_tokenizer.hpp: a Hugging Face `pre_tokenizer` run as written, with PCRE2.
///
/// OPTIONAL COMPONENT, like megacpp/data/bpe_tokenizer.hpp which uses it: needs PCRE2 (Debian:
/// libpcre2-dev; pkg-config `libpcre2-8`) and nlohmann_json.
///
/// A pre-tokenizer cuts the text between added tokens into pieces that BPE then encodes one by
/// one. Hugging Face `tokenizers` (src/pre_tokenizers/, src/tokenizer/normalizer.rs `split`) runs
/// a list of steps, each cutting every piece the previous steps left; the steps reproduced here:
///   Split{pattern, behavior, invert}  matches of a regex (or a literal String) cut the piece;
///                                     behavior says what happens to the matches:
///       Isolated            every match and every gap between matches is a piece
///       Removed             the gaps are pieces, the matches are dropped
///       MergedWithPrevious  a match joins the piece before it
///       MergedWithNext      a match joins the piece after it
///       Contiguous          adjacent matches form one piece, each gap is a piece
///                           (invert: the gaps play the matches' part and the other way round)
///   ByteLevel{add_prefix_space, use_regex}   a space before each piece that lacks one, then
///                                     (use_regex) a Split by GPT-2's pattern, Isolated:
///       `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
///                                     (openai/gpt-2 src/encoder.py `pat`)
///   Digits{individual_digits}         numeric characters (`\p{N}`, Rust's char::is_numeric) cut
///                                     the piece, each alone or as runs (Contiguous)
///   Sequence{pretokenizers}           the steps in order.
/// Empty pieces are dropped. Any other step type is refused by name: an approximation would be
/// a tokenization that silently differs from the one the vocabulary was trained with.
///
/// Regexes: Hugging Face compiles Split patterns with Oniguruma; PCRE2 with PCRE2_UTF and
/// PCRE2_UCP (`\p{..}`, `\s`, `\d` and case folding by Unicode properties) matches them on the
/// patterns of GPT-2, Llama-3 and StarCoder tokenizers (tests/data/test_bpe_agreement.cpp checks
/// token-for-token agreement on 12 documents, scripts/tokenizer-goldens.py writes them).
///
/// Input that is not valid UTF-8 (Hugging Face cannot take it: a Rust String always is) is cut
/// into its maximal valid runs, each pre-tokenized as above, and each invalid byte is a piece of
/// its own, so every byte string still encodes and decodes back exactly.
#pragma once

/// PCRE2's 8-bit library (UTF-8 subjects and patterns), chosen before <pcre2.h> as it requires.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/core/error.hpp"
#include "megacpp/io/json_value.hpp"

namespace megacpp::data {

/// A compiled PCRE2 regex (UTF, UCP; JIT-compiled where the platform has it). Shared by copies.
class Pcre2Regex {
 public:
  /// Compiles `pattern` (a literal string when `literal`); throws naming `where` and PCRE2's
  /// message with the offset of the error.
  Pcre2Regex(std::string_view pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // UCP is for classes, which a literal has none of
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                     &offset, nullptr);
    if (!code) fail("pre_tokenizer", where, ": regex ", quoted(pattern), " does not compile at offset ", offset, ": ", message(error));
    code_.reset(code, pcre2_code_free);
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // a failure (no JIT here) leaves the interpreter: same results
  }

  /// Calls on_match(begin, end) for each non-empty match in `s` (valid UTF-8), left to right,
  /// without overlap, as a find-all loop does (an empty match is skipped by one character).
  template <class OnMatch>
  void for_each_match(std::string_view s, OnMatch&& on_match) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free);
    check(data != nullptr, "pre_tokenizer", "out of memory for PCRE2 match data");
    // PCRE2 counts U+180E MONGOLIAN VOWEL SEPARATOR as \s (its \h list keeps the character's
    // Unicode 6.2 category, Zs); Oniguruma and Unicode >= 6.3 do not (Cf). The one difference
    // between the two engines' \s: match on a copy where U+180E is U+200B ZERO WIDTH SPACE, a Cf
    // outside \h with the same UTF-8 length, so every offset holds for `s` itself.
    std::string substituted;
    if (s.find(kMongolianVowelSeparator) != std::string_view::npos) {
      substituted.assign(s);
      for (std::size_t k = substituted.find(kMongolianVowelSeparator); k != std::string::npos;
           k = substituted.find(kMongolianVowelSeparator, k + 3))
        substituted.replace(k, 3, kZeroWidthSpace);
      s = substituted;
    }
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    std::size_t at = 0;
    while (at < s.size()) {
      // The input was validated once by the caller: NO_UTF_CHECK skips PCRE2's check per call,
      // which is quadratic over the pieces of a long run.
      const int rc = pcre2_match(code_.get(), subject, s.size(), at, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) fail("pre_tokenizer", "regex match failed: ", message(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const std::size_t begin = ovector[0], end = ovector[1];
      if (end > begin) {
        on_match(begin, end);
        at = end;
      } else {  // empty: step over one code point
        at = begin + 1;
        while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
      }
    }
  }

 private:
  static constexpr std::string_view kMongolianVowelSeparator = "\xE1\xA0\x8E";  // U+180E
  static constexpr std::string_view kZeroWidthSpace = "\xE2\x80\x8B";            // U+200B

  static std::string message(int code) {
    PCRE2_UCHAR buffer[256];
    const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
    return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer));
  }
  static std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

  std::shared_ptr<pcre2_code> code_;
};

/// What a Split step does with the matches of its pattern (Hugging Face SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// A `pre_tokenizer` of a tokenizer.json: the steps the file comment lists, run in order.
class PreTokenizer {
 public:
  /// GPT-2's pre-tokenizer: ByteLevel(add_prefix_space = false, use_regex = true).
  static PreTokenizer gpt2() {
    PreTokenizer p;
    p.steps_.push_back(byte_level_step(false, true));
    return p;
  }

  /// The pipeline of `node` (a tokenizer.json's "pre_tokenizer"); throws naming `where` and the
  /// first step it cannot reproduce. A null node is no pre-tokenization (the run is one piece).
  static PreTokenizer from_json(const nlohmann::json& node, const std::string& where) {
    PreTokenizer p;
    if (!node.is_null()) p.add(node, where);
    return p;
  }

  /// True when a ByteLevel step is part of the pipeline.
  bool has_byte_level() const { return has_byte_level_; }
  /// True when a Split step with behavior Removed drops part of the text (decode cannot give it back).
  bool drops_text() const {
    for (const Step& step : steps_)
      if (step.regex && step.behavior == SplitBehavior::removed) return true;
    return false;
  }
  /// ByteLevel's add_prefix_space (false when there is no ByteLevel step).
  bool add_prefix_space() const { return add_prefix_space_; }

  /// Cuts `text` into pieces and calls emit(std::string_view piece) for each, in order; their
  /// concatenation is `text`, except for the spaces ByteLevel add_prefix_space inserts. A piece
  /// lives only during its call.
  template <class Emit>
  void split(std::string_view text, Emit&& emit) const {
    std::size_t valid_from = 0;
    for (std::size_t i = 0; i < text.size();) {
      if (static_cast<unsigned char>(text[i]) < 0x80) {  // ASCII, most of a source file
        ++i;
        continue;
      }
      const char* why = nullptr;
      std::size_t bad = 0;
      const std::size_t len = io::detail::utf8_sequence_length(text.substr(i), why, bad);
      if (len > 0) {
        i += len;
        continue;
      }
      run_steps(0, text.substr(valid_from, i - valid_from), emit);
      emit(text.substr(i, 1));  // an invalid byte: a piece of its own
      valid_from = ++i;
    }
    run_steps(0, text.substr(valid_from), emit);
  }

  /// The pieces of `text` (see split above), appended to `pieces`.
  void split(std::string_view text, std::vector<std::string>& pieces) const {
    split(text, [&](std::string_view piece) { pieces.emplace_back(piece); });
  }

 private:
  struct Step {
    std::shared_ptr<const Pcre2Regex> regex;  // null: no cut (ByteLevel without use_regex)
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    bool prefix_space = false;  // ByteLevel add_prefix_space
  };

  static constexpr const char* kGpt2Pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

  static Step byte_level_step(bool add_prefix_space, bool use_regex) {
    static const auto gpt2 = std::make_shared<const Pcre2Regex>(kGpt2Pattern, false, "GPT-2 pattern");
    return Step{use_regex ? gpt2 : nullptr, SplitBehavior::isolated, false, add_prefix_space};
  }

  static std::string type_name(const nlohmann::json& node) {
    const auto t = node.is_object() ? node.find("type") : node.end();
    return node.is_object() && t != node.end() && t->is_string() ? t->get<std::string>() : node.dump();
  }

  static bool flag(const nlohmann::json& node, const char* key, bool fallback, const std::string& where) {
    const auto it = node.find(key);
    if (it == node.end() || it->is_null()) return fallback;
    check(it->is_boolean(), "pre_tokenizer", where, ": ", type_name(node), ".", key, " is ", it->dump(), ", not a boolean");
    return it->get<bool>();
  }

  static SplitBehavior behavior(const nlohmann::json& node, const std::string& where) {
    const auto it = node.find("behavior");
    check(it != node.end() && it->is_string(), "pre_tokenizer", where, ": ", type_name(node), ".behavior is missing");
    const std::string b = it->get<std::string>();
    if (b == "Removed") return SplitBehavior::removed;
    if (b == "Isolated") return SplitBehavior::isolated;
    if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
    if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
    if (b == "Contiguous") return SplitBehavior::contiguous;
    fail("pre_tokenizer", where, ": Split.behavior \"", b,
         "\" is unknown (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
  }

  void add(const nlohmann::json& node, const std::string& where) {
    const std::string type = type_name(node);
    check(node.is_object(), "pre_tokenizer", where, ": a step is ", node.dump(), ", not an object");
    if (type == "Sequence") {
      const auto list = node.find("pretokenizers");
      check(list != node.end() && list->is_array(), "pre_tokenizer", where, ": Sequence has no \"pretokenizers\" array");
      for (const auto& child : *list) add(child, where);
    } else if (type == "ByteLevel") {
      add_prefix_space_ = flag(node, "add_prefix_space", true, where);  // the library's default is true
      has_byte_level_ = true;
      steps_.push_back(byte_level_step(add_prefix_space_, flag(node, "use_regex", true, where)));
    } else if (type == "Split") {
      const auto pattern = node.find("pattern");
      check(pattern != node.end() && pattern->is_object() && pattern->size() == 1, "pre_tokenizer", where,
            ": Split.pattern must be {\"Regex\": ...} or {\"String\": ...}, got ",
            pattern == node.end() ? std::string("nothing") : pattern->dump());
      const auto regex = pattern->find("Regex");
      const auto literal = pattern->find("String");
      const auto& text = regex != pattern->end() ? *regex : *literal;
      check((regex != pattern->end() || literal != pattern->end()) && text.is_string(), "pre_tokenizer", where,
            ": Split.pattern must be {\"Regex\": ...} or {\"String\": ...}, got ", pattern->dump());
      steps_.push_back(Step{std::make_shared<const Pcre2Regex>(text.get<std::string>(), regex == pattern->end(), where),
                            behavior(node, where), flag(node, "invert", false, where), false});
    } else if (type == "Digits") {
      static const auto numeric = std::make_shared<const Pcre2Regex>(R"(\p{N})", false, "Digits");
      steps_.push_back(Step{numeric, flag(node, "individual_digits", false, where) ? SplitBehavior::isolated
                                                                                   : SplitBehavior::contiguous,
                            false, false});
    } else {
      fail("pre_tokenizer", where, ": pre_tokenizer step \"", type,
           "\" is not supported (Sequence, ByteLevel, Split and Digits are); megacpp refuses it rather than "
           "tokenize differently from the vocabulary's own tokenizer");
    }
  }

  // Steps k.. on `piece` (valid UTF-8), depth first: each piece step k leaves goes through the
  // later steps before the next one is cut, so no list of all pieces is ever built.
  template <class Emit>
  void run_steps(std::size_t k, std::string_view piece, Emit& emit) const {
    if (piece.empty()) return;
    if (k == steps_.size()) {
      emit(piece);
      return;
    }
    const Step& step = steps_[k];
    std::string prefixed;
    if (step.prefix_space && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed.append(1, ' ').append(piece);
      piece = prefixed;
    }
    if (!step.regex) return run_steps(k + 1, piece, emit);
    cut(piece, step, [&](std::string_view sub) { run_steps(k + 1, sub, emit); });
  }

  // Hugging Face normalizer.rs `split`: the pattern's matches and the gaps between them, in order,
  // then merged or dropped by the behavior; empty pieces never survive.
  template <class OnPiece>
  static void cut(std::string_view piece, const Step& step, OnPiece&& on_piece) {
    struct Span {
      std::size_t begin, end;
      bool is_match;
    };
    std::size_t previous = 0;
    if (step.behavior == SplitBehavior::isolated || step.behavior == SplitBehavior::removed) {
      // The common case (every ByteLevel regex, Llama-3's Split), streamed. Removed drops the
      // matches, or with invert the gaps (which then play the matches' part).
      const bool isolated = step.behavior == SplitBehavior::isolated;
      const bool keep_gaps = isolated || !step.invert;
      const bool keep_matches = isolated || step.invert;
      step.regex->for_each_match(piece, [&](std::size_t begin, std::size_t end) {
        if (begin != previous && keep_gaps) on_piece(piece.substr(previous, begin - previous));
        if (keep_matches) on_piece(piece.substr(begin, end - begin));
        previous = end;
      });
      if (previous != piece.size() && keep_gaps) on_piece(piece.substr(previous));
      return;
    }
    std::vector<Span> spans;
    step.regex->for_each_match(piece, [&](std::size_t begin, std::size_t end) {
      if (begin != previous) spans.push_back({previous, begin, false});
      spans.push_back({begin, end, true});
      previous = end;
    });
    if (previous != piece.size()) spans.push_back({previous, piece.size(), false});
    if (step.invert)
      for (Span& s : spans) s.is_match = !s.is_match;

    std::vector<Span> kept;  // the merged pieces
    bool previous_match = false;
    switch (step.behavior) {
      case SplitBehavior::isolated:
      case SplitBehavior::removed:
        break;  // streamed above
      case SplitBehavior::contiguous:
        for (const Span& s : spans) {
          if (s.is_match == previous_match && !kept.empty()) kept.back().end = s.end;
          else kept.push_back({s.begin, s.end, false});
          previous_match = s.is_match;
        }
        break;
      case SplitBehavior::merged_with_previous:
        for (const Span& s : spans) {
          if (s.is_match && !previous_match && !kept.empty()) kept.back().end = s.end;
          else kept.push_back({s.begin, s.end, false});
          previous_match = s.is_match;
        }
        break;
      case SplitBehavior::merged_with_next:
        for (auto s = spans.rbegin(); s != spans.rend(); ++s) {
          if (s->is_match && !previous_match && !kept.empty()) kept.back().begin = s->begin;
          else kept.push_back({s->begin, s->end, false});
          previous_match = s->is_match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
    }
    for (const Span& s : kept)
      if (s.end > s.begin) on_piece(piece.substr(s.begin, s.end - s.begin));
  }

  std::vector<Step> steps_;
  bool has_byte_level_ = false;
  bool add_prefix_space_ = false;
};

}  // namespace megacpp::data
