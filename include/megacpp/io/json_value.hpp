// megacpp/io/json_value.hpp: a strict, minimal JSON reader and writer for file headers.
//
// The core library depends on Eigen alone, so reading a safetensors header does not pull in a
// JSON library. This handles the full JSON grammar except that numbers must be integers (all a
// safetensors header holds); anything malformed throws megacpp::Error with the byte offset.
#pragma once

#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/core/error.hpp"

namespace megacpp::io {

/// A parsed JSON value (null, bool, integer, string, array or object).
struct JsonValue {
  /// Which JSON type a value holds; it selects the member that carries the value.
  enum class Kind { null, boolean, integer, string, array, object };
  Kind kind = Kind::null;                   ///< the type of this value
  bool boolean = false;                     ///< the value when kind is Kind::boolean
  std::int64_t integer = 0;                 ///< the value when kind is Kind::integer
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
class JsonParser {
 public:
  JsonParser(std::string_view text, std::string context) : text_(text), context_(std::move(context)) {}

  JsonValue parse_document() {
    JsonValue v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) error("trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void error(std::string_view what) const {
    fail(context_, "malformed JSON header: ", what, " at byte ", pos_);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= text_.size()) error("unexpected end");
    return text_[pos_];
  }
  void expect(char c) {
    if (peek() != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool consume_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) error("nesting too deep");
    JsonValue v;
    const char c = peek();
    if (c == '{') {
      v.kind = JsonValue::Kind::object;
      ++pos_;
      if (peek() == '}') { ++pos_; return v; }
      while (true) {
        if (peek() != '"') error("expected a string key");
        std::string key = parse_string();
        expect(':');
        if (!v.object.emplace(key, parse_value(depth + 1)).second) error("duplicate key \"" + key + "\"");
        if (peek() == ',') { ++pos_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Kind::array;
      ++pos_;
      if (peek() == ']') { ++pos_; return v; }
      while (true) {
        v.array.push_back(parse_value(depth + 1));
        if (peek() == ',') { ++pos_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.string = parse_string();
      return v;
    }
    if (consume_literal("true")) { v.kind = JsonValue::Kind::boolean; v.boolean = true; return v; }
    if (consume_literal("false")) { v.kind = JsonValue::Kind::boolean; return v; }
    if (consume_literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::integer;
      const char* begin = text_.data() + pos_;
      const auto [end, ec] = std::from_chars(begin, text_.data() + text_.size(), v.integer);
      if (ec != std::errc()) error("invalid or out-of-range integer");
      pos_ += static_cast<std::size_t>(end - begin);
      if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) error("non-integer number");
      return v;
    }
    error("unexpected character");
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') { out += c; continue; }
      if (pos_ >= text_.size()) error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, parse_hex4()); break;
        default: error("invalid escape");
      }
    }
  }
  unsigned parse_hex4() {
    if (pos_ + 4 > text_.size()) error("short \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return code;
  }
  void append_utf8(std::string& s, unsigned cp) {
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // surrogate pair
      if (!consume_literal("\\u")) error("lone high surrogate");
      const unsigned low = parse_hex4();
      if (low < 0xDC00 || low > 0xDFFF) error("bad low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp < 0x80) s += static_cast<char>(cp);
    else if (cp < 0x800) { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { s += static_cast<char>(0xE0 | (cp >> 12)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    else { s += static_cast<char>(0xF0 | (cp >> 18)); s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
  }

  std::string_view text_;
  std::string context_;
  std::size_t pos_ = 0;
};
}  // namespace detail

/// Parses `text`; errors name `context` (e.g. the file) and the byte offset.
inline JsonValue parse_json(std::string_view text, const std::string& context) {
  return detail::JsonParser(text, context).parse_document();
}

/// `s` as a JSON string literal (quotes and escapes added).
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
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
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace megacpp::io
