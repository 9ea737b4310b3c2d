// megacpp/io/json_value.hpp: a strict JSON reader (RFC 8259) and a string quoter for file headers.
//
// The core library depends on Eigen alone, so reading a safetensors header does not pull in a
// JSON library. Every input is hostile until parsed: the reader accepts exactly the RFC 8259
// grammar and nothing else, and every rejection is a megacpp::Error naming the context (the file),
// the problem, the offending text and the byte offset.
// - Numbers: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, so `01`, `+1`, `.5`, `1.` and
//   `1e` are errors. A number without fraction or exponent is an integer and must fit int64; any
//   other must fit a double (RFC 8259 section 9 lets a reader limit the range; values out of the
//   range are errors, never silently rounded to infinity or zero).
// - Strings: control characters (< 0x20) must be escaped; `\u` takes four hex digits; a UTF-16
//   surrogate must be a high one followed by a low one (a lone surrogate is not a character);
//   the raw bytes must be well-formed UTF-8 (Unicode 15, table 3-7: no overlong forms, no
//   surrogates encoded in UTF-8, nothing above U+10FFFF, no truncated sequences).
// - Objects: duplicate keys are errors (RFC 8259 leaves them to the reader; taking one silently
//   would drop data).
// - Nesting: at most kJsonMaxDepth arrays and objects deep. The parser recurses once per level, so
//   the limit is what keeps a hostile file (100,000 `[`) from overflowing the stack.
// - Nothing may follow the top-level value but whitespace.
// validate_json() runs the same checks without building values, for readers that parse with
// another library afterwards (data/bpe_tokenizer.hpp does, with nlohmann_json); read_json_file()
// reads and validates a whole file for them.
#pragma once

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/io/mapped_file.hpp"
#include "megacpp/io/utf8.hpp"

namespace megacpp::io {

/// Deepest nesting of arrays and objects any megacpp JSON reader accepts (a safetensors header
/// is 3 deep, a tokenizer.json about 6): deep enough for every real file, shallow enough that
/// recursive code over the parsed value cannot exhaust a thread's stack.
inline constexpr int kJsonMaxDepth = 512;

/// A parsed JSON value (null, bool, integer, other number, string, array or object).
struct JsonValue {
  /// Which JSON type a value holds; it selects the member that carries the value. A number
  /// without fraction or exponent is an `integer`; any other number is a `number`.
  enum class Kind { null, boolean, integer, number, string, array, object };
  Kind kind = Kind::null;                   ///< the type of this value
  bool boolean = false;                     ///< the value when kind is Kind::boolean
  std::int64_t integer = 0;                 ///< the value when kind is Kind::integer
  double number = 0;                        ///< the value when kind is Kind::number
  std::string string;                       ///< the value when kind is Kind::string
  std::vector<JsonValue> array;             ///< the elements when kind is Kind::array
  std::map<std::string, JsonValue> object;  ///< the members when kind is Kind::object

  /// The member `key` of an object; throws naming `context` when absent or not an object.
  const JsonValue& at(const std::string& key, std::string_view context) const {
    check(kind == Kind::object, std::string(context), "expected a JSON object");
    const auto it = object.find(key);
    check(it != object.end(), std::string(context), "missing key \"", key, "\"");
    return it->second;
  }
};

namespace detail {

/// Length of the well-formed UTF-8 sequence at the start of `s` (1 to 4), or 0 with `why` set
/// to the rule it breaks (Unicode 15, table 3-7 "Well-Formed UTF-8 Byte Sequences") and `bad`
/// to the number of bytes that show it (the lead byte up to the first offending one).
inline std::size_t utf8_sequence_length(std::string_view s, const char*& why, std::size_t& bad) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  bad = 1;
  if (b0 < 0xC0) { why = "a continuation byte without a lead byte"; return 0; }
  if (b0 > 0xF4) { why = "a lead byte above 0xF4 (code point beyond U+10FFFF)"; return 0; }
  bad = s.size() < 2 ? 1 : 2;
  if (b0 < 0xC2) { why = "an overlong encoding (lead byte 0xC0 or 0xC1)"; return 0; }
  const std::size_t length = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  // The second byte's range depends on the lead byte; the later ones are always 0x80-0xBF.
  unsigned char low = 0x80, high = 0xBF;
  if (b0 == 0xE0) low = 0xA0;       // below: overlong 3-byte form
  else if (b0 == 0xED) high = 0x9F;  // above: U+D800-U+DFFF, a surrogate
  else if (b0 == 0xF0) low = 0x90;  // below: overlong 4-byte form
  else if (b0 == 0xF4) high = 0x8F;  // above: beyond U+10FFFF
  for (std::size_t i = 1; i < length; ++i) {
    bad = i >= s.size() ? i : i + 1;
    if (i >= s.size() || byte(i) < 0x80 || byte(i) > 0xBF) { why = "a truncated multi-byte sequence"; return 0; }
    if (i == 1 && (byte(1) < low || byte(1) > high)) {
      why = b0 == 0xED ? "a UTF-16 surrogate encoded in UTF-8"
            : b0 == 0xF4 ? "a code point beyond U+10FFFF"
                         : "an overlong encoding";
      return 0;
    }
  }
  return length;
}

/// The first `count` bytes of `s` as "0xC0 0x80", for error messages.
inline std::string hex_bytes(std::string_view s, std::size_t count) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < count && i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (i) out += ' ';
    out.append("0x").append(1, digits[b >> 4]).append(1, digits[b & 0xF]);
  }
  return out;
}

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string context) : text_(text), context_(std::move(context)) {}

  // The whole text as one value: whitespace, a value, whitespace, the end.
  JsonValue parse_document() {
    JsonValue v;
    parse_value<true>(&v, 0);
    expect_end();
    return v;
  }
  // The same checks, building nothing.
  void validate_document() {
    parse_value<false>(nullptr, 0);
    expect_end();
  }

 private:
  [[noreturn]] void error_at(std::size_t at, std::string_view what) const {
    fail(context_, "malformed JSON: ", what, " at byte ", at);
  }
  [[noreturn]] void error(std::string_view what) const { error_at(pos_, what); }

  bool at_end() const { return pos_ >= text_.size(); }
  void skip_space() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_space();
    if (at_end()) error("unexpected end of input");
    return text_[pos_];
  }
  void expect(char c, std::string_view where) {
    if (peek() != c) error(std::string("expected '").append(1, c).append("' ").append(where).append(", found ") +
                           describe(pos_));
    ++pos_;
  }
  void expect_end() {
    skip_space();
    if (!at_end()) error("trailing characters after the value: " + describe(pos_));
  }
  // The character at `at` for a message: 'x' when printable ASCII, else its bytes in hex.
  std::string describe(std::size_t at) const {
    if (at >= text_.size()) return "the end of input";
    const auto c = static_cast<unsigned char>(text_[at]);
    if (c >= 0x20 && c < 0x7F) return std::string("'").append(1, static_cast<char>(c)).append("'");
    return "byte " + hex_bytes(text_.substr(at), 1);
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  bool digit_here() const { return !at_end() && is_digit(text_[pos_]); }
  bool consume_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // A value at `depth` enclosing arrays/objects into *out (Build) or nowhere (!Build).
  template <bool Build>
  void parse_value(JsonValue* out, int depth) {
    const char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= kJsonMaxDepth)
        error("nesting deeper than the limit of " + std::to_string(kJsonMaxDepth) + " arrays and objects");
      if (c == '{') parse_object<Build>(out, depth + 1);
      else parse_array<Build>(out, depth + 1);
      return;
    }
    if (c == '"') {
      if constexpr (Build) {
        out->kind = JsonValue::Kind::string;
        parse_string(out->string);
      } else {
        scratch_.clear();
        parse_string(scratch_);
      }
      return;
    }
    if (c == '-' || is_digit(c)) return parse_number<Build>(out);
    const std::size_t start = pos_;
    JsonValue::Kind kind = JsonValue::Kind::null;
    bool truth = false;
    if (consume_literal("true")) kind = JsonValue::Kind::boolean, truth = true;
    else if (consume_literal("false")) kind = JsonValue::Kind::boolean;
    else if (!consume_literal("null")) error_at(start, "expected a value, found " + describe(start));
    if constexpr (Build) {
      out->kind = kind;
      out->boolean = truth;
    }
  }

  template <bool Build>
  void parse_object(JsonValue* out, int depth) {
    ++pos_;  // '{'
    if constexpr (Build) out->kind = JsonValue::Kind::object;
    std::set<std::string> keys;  // only when validating: the built map detects duplicates itself
    if (peek() == '}') { ++pos_; return; }
    while (true) {
      if (peek() != '"') error("expected a string key, found " + describe(pos_));
      const std::size_t key_at = pos_;
      std::string key;
      parse_string(key);
      expect(':', "after an object key");
      bool fresh = false;
      if constexpr (Build) {
        const auto [it, inserted] = out->object.try_emplace(key);
        fresh = inserted;
        if (fresh) parse_value<true>(&it->second, depth);
      } else {
        fresh = keys.insert(key).second;
        if (fresh) parse_value<false>(nullptr, depth);
      }
      if (!fresh) error_at(key_at, "duplicate key \"" + key + "\"");
      if (peek() == ',') { ++pos_; continue; }
      expect('}', "or ',' after an object member");
      return;
    }
  }

  template <bool Build>
  void parse_array(JsonValue* out, int depth) {
    ++pos_;  // '['
    if constexpr (Build) out->kind = JsonValue::Kind::array;
    if (peek() == ']') { ++pos_; return; }
    while (true) {
      if constexpr (Build) parse_value<true>(&out->array.emplace_back(), depth);
      else parse_value<false>(nullptr, depth);
      if (peek() == ',') { ++pos_; continue; }
      expect(']', "or ',' after an array element");
      return;
    }
  }

  // RFC 8259 section 6: number = [ minus ] int [ frac ] [ exp ].
  template <bool Build>
  void parse_number(JsonValue* out) {
    const std::size_t start = pos_;
    const auto so_far = [&] { return "\"" + std::string(text_.substr(start, pos_ + 1 - start)) + "\""; };
    if (text_[pos_] == '-') ++pos_;
    if (!digit_here()) error("expected a digit after '-', found " + describe(pos_));
    if (text_[pos_] == '0') {
      ++pos_;
      if (digit_here()) error("number " + so_far() + " has a leading zero");
    } else {
      while (digit_here()) ++pos_;
    }
    bool integral = true;
    if (!at_end() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (!digit_here()) error("number " + so_far() + " needs a digit after the decimal point");
      while (digit_here()) ++pos_;
    }
    if (!at_end() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (!at_end() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digit_here()) error("number " + so_far() + " needs a digit in its exponent");
      while (digit_here()) ++pos_;
    }
    const std::string_view literal = text_.substr(start, pos_ - start);
    const char* first = literal.data();
    const char* last = first + literal.size();
    std::int64_t integer = 0;
    double number = 0;
    const std::errc ec = integral ? std::from_chars(first, last, integer).ec : std::from_chars(first, last, number).ec;
    if (ec != std::errc())
      error_at(start, "number " + std::string(literal) +
                          (integral ? " is outside the int64 range" : " is outside the range of a double"));
    if constexpr (Build) {
      out->kind = integral ? JsonValue::Kind::integer : JsonValue::Kind::number;
      out->integer = integer;
      out->number = number;
    }
  }

  void parse_string(std::string& out) {
    const std::size_t start = pos_;
    ++pos_;  // opening quote
    while (true) {
      if (at_end()) error_at(start, "unterminated string");
      const char c = text_[pos_];
      if (c == '"') { ++pos_; return; }
      const auto byte = static_cast<unsigned char>(c);
      if (byte < 0x20) error("unescaped control character " + hex_bytes(text_.substr(pos_), 1) + " in a string");
      if (byte >= 0x80) {
        const char* why = "";
        std::size_t bad = 0;
        const std::size_t length = utf8_sequence_length(text_.substr(pos_), why, bad);
        if (length == 0) error(std::string("invalid UTF-8 in a string (") + why + ": " + hex_bytes(text_.substr(pos_), bad) + ")");
        out.append(text_.substr(pos_, length));
        pos_ += length;
        continue;
      }
      ++pos_;
      if (c != '\\') { out += c; continue; }
      if (at_end()) error_at(start, "unterminated string");
      switch (text_[pos_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': io::append_utf8(out, parse_unicode_escape()); break;
        default: error_at(pos_ - 2, "invalid escape \\" + std::string(1, text_[pos_ - 1]).append(" in a string"));
      }
    }
  }
  // The four hex digits after "\u" (already consumed).
  unsigned parse_hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      if (at_end()) error("\\u escape needs four hex digits, found the end of input");
      const char h = text_[pos_];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
      else error("\\u escape needs four hex digits, found " + describe(pos_));
      ++pos_;
    }
    return code;
  }
  // A code point from "\uXXXX" or a surrogate pair "\uD83D\uDE00" (RFC 8259 section 7).
  unsigned parse_unicode_escape() {
    const std::size_t start = pos_ - 2;
    const unsigned unit = parse_hex4();
    const auto hex = [](unsigned u) {
      static constexpr char digits[] = "0123456789ABCDEF";
      std::string s = "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) s += digits[(u >> shift) & 0xF];
      return s;
    };
    if (unit >= 0xDC00 && unit <= 0xDFFF) error_at(start, "lone low surrogate " + hex(unit) + " in a string");
    if (unit < 0xD800 || unit > 0xDBFF) return unit;
    if (!consume_literal("\\u")) error_at(start, "high surrogate " + hex(unit) + " not followed by a low surrogate");
    const unsigned low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF)
      error_at(start, "high surrogate " + hex(unit) + " followed by " + hex(low) + ", not a low surrogate");
    return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
  }


  std::string_view text_;
  std::string context_;
  std::size_t pos_ = 0;
  std::string scratch_;  // string values while validating
};
}  // namespace detail

/// Parses `text`; errors name `context` (e.g. the file), the problem and the byte offset.
inline JsonValue parse_json(std::string_view text, const std::string& context) {
  return detail::JsonParser(text, context).parse_document();
}

/// Checks that `text` is one JSON document that parse_json() accepts (grammar, UTF-8, duplicate
/// keys, nesting at most kJsonMaxDepth) without building it: the guard for readers that parse
/// with another library afterwards. Throws as parse_json() does.
inline void validate_json(std::string_view text, const std::string& context) {
  detail::JsonParser(text, context).validate_document();
}

/// The text of the JSON file `path` after validate_json(): for readers that parse with another
/// library (the trainer's state.json with nlohmann_json). A missing file, a directory, a read
/// error, bad grammar or too deep a nesting is an Error naming `op`, the file and the problem.
inline std::string read_json_file(const std::filesystem::path& path, const std::string& op) {
  const MappedFile file(path, op);
  std::string text(file.bytes().begin(), file.bytes().end());
  validate_json(text, op + " " + path.string());
  return text;
}

/// `s` as a JSON string literal (quotes and escapes added). `s` must be valid UTF-8 (throws
/// naming the byte otherwise): a writer must not produce what the reader refuses.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[(c >> 4) & 0xF];
          out += hex[c & 0xF];
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          const char* why = "";
          std::size_t bad = 0;
          const std::size_t length = detail::utf8_sequence_length(s.substr(i), why, bad);
          if (length == 0)
            fail("json_quote", "string is not valid UTF-8 at byte ", i, " (", why, ": ", detail::hex_bytes(s.substr(i), bad), ")");
          out.append(s.substr(i, length));
          i += length - 1;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace megacpp::io
