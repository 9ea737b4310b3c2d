// io/json_value.hpp under hostile input: RFC 8259 grammar exactly, UTF-8 checked, nesting bounded.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/temp_dir.hpp"
#include "megacpp/io/json_value.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;

namespace {
io::JsonValue parse(const std::string& text) { return io::parse_json(text, "test.json"); }
std::string nested_arrays(int depth) { return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']'); }
// The same text must be refused by parse_json and by validate_json, with the same message.
void check_rejected(const std::string& text, const std::string& message) {
  INFO("input: " << text);
  CHECK_THROWS_WITH(parse(text), Contains(message));
  CHECK_THROWS_WITH(io::validate_json(text, "test.json"), Contains(message));
}
}  // namespace

TEST_CASE("json: every valid number form parses to its value", "[io][json]") {
  CHECK(parse("0").integer == 0);
  CHECK(parse("-0").kind == io::JsonValue::Kind::integer);
  CHECK(parse("-0").integer == 0);
  CHECK(parse("123").integer == 123);
  CHECK(parse("-9223372036854775808").integer == INT64_MIN);
  CHECK(parse("9223372036854775807").integer == INT64_MAX);
  CHECK(parse("0.5").kind == io::JsonValue::Kind::number);
  CHECK(parse("0.5").number == 0.5);
  CHECK(parse("-1.25").number == -1.25);
  CHECK(parse("1e3").number == 1000.0);
  CHECK(parse("1E3").number == 1000.0);
  CHECK(parse("1e+3").number == 1000.0);
  CHECK(parse("25e-2").number == 0.25);
  CHECK(parse("-0.0").number == 0.0);
  CHECK(parse("0e0").number == 0.0);
  CHECK(parse("1.5E-1").number == 0.15);
  CHECK(parse("1.7976931348623157e308").number == 1.7976931348623157e308);
  CHECK(parse(" [1, -2.5e1, 0] ").array[1].number == -25.0);
}

TEST_CASE("json: malformed numbers are refused naming the literal and the byte", "[io][json][errors]") {
  check_rejected("01", "number \"01\" has a leading zero at byte 1");
  check_rejected("[-007]", "number \"-00\" has a leading zero at byte 3");
  check_rejected("+1", "expected a value, found '+' at byte 0");
  check_rejected(".5", "expected a value, found '.' at byte 0");
  check_rejected("1.", "number \"1.\" needs a digit after the decimal point at byte 2");
  check_rejected("[1.e5]", "number \"1.e\" needs a digit after the decimal point at byte 3");
  check_rejected("1e", "number \"1e\" needs a digit in its exponent at byte 2");
  check_rejected("1e+", "number \"1e+\" needs a digit in its exponent at byte 3");
  check_rejected("-", "expected a digit after '-', found the end of input at byte 1");
  check_rejected("-a", "expected a digit after '-', found 'a' at byte 1");
  check_rejected("0x10", "trailing characters after the value: 'x' at byte 1");
  check_rejected("9223372036854775808", "number 9223372036854775808 is outside the int64 range at byte 0");
  check_rejected("[1e400]", "number 1e400 is outside the range of a double at byte 1");
  check_rejected("NaN", "expected a value, found 'N' at byte 0");
  check_rejected("Infinity", "expected a value, found 'I' at byte 0");
}

TEST_CASE("json: strings decode escapes and valid surrogate pairs", "[io][json]") {
  CHECK(parse(R"("a\"b\\c\/d\b\f\n\r\t")").string == "a\"b\\c/d\b\f\n\r\t");
  CHECK(parse(R"("\u0041\u00e9\u20AC")").string == "A\xC3\xA9\xE2\x82\xAC");
  CHECK(parse(R"("\u0000")").string == std::string(1, '\0'));
  CHECK(parse(R"("\ud83d\ude00")").string == "\xF0\x9F\x98\x80");  // U+1F600 as a surrogate pair
  CHECK(parse(R"("\uDBFF\uDFFF")").string == "\xF4\x8F\xBF\xBF");  // U+10FFFF, the last code point
  // Raw UTF-8 at every length and at the edges of table 3-7.
  CHECK(parse("\"\xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xF0\x90\x80\x80 \xF4\x8F\xBF\xBF\"").string ==
        "\xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xF0\x90\x80\x80 \xF4\x8F\xBF\xBF");
  CHECK(parse("\"\x7F\"").string == "\x7F");  // DEL is not a control character in JSON
}

TEST_CASE("json: bad strings are refused naming the bytes and the offset", "[io][json][errors]") {
  check_rejected(std::string("\"a\nb\""), "unescaped control character 0x0A in a string at byte 2");
  check_rejected(std::string("\"\x01\""), "unescaped control character 0x01 in a string at byte 1");
  check_rejected(R"("\x")", "invalid escape \\x in a string at byte 1");
  check_rejected(R"("\u12G4")", "\\u escape needs four hex digits, found 'G' at byte 5");
  check_rejected(R"("\u12)", "\\u escape needs four hex digits, found the end of input at byte 5");
  check_rejected(R"("abc)", "unterminated string at byte 0");
  check_rejected(R"(["ok", "\ud800"])", "high surrogate \\uD800 not followed by a low surrogate at byte 8");
  check_rejected(R"("\ud800x")", "high surrogate \\uD800 not followed by a low surrogate at byte 1");
  check_rejected(R"("\udc00")", "lone low surrogate \\uDC00 in a string at byte 1");
  check_rejected(R"("\ud800\u0041")", "high surrogate \\uD800 followed by \\u0041, not a low surrogate at byte 1");
  check_rejected(R"("\ud800\ud800")", "high surrogate \\uD800 followed by \\uD800, not a low surrogate");
  // Invalid UTF-8: overlong, surrogates in UTF-8, beyond U+10FFFF, truncated, stray continuation.
  check_rejected("\"\xC0\xAF\"", "invalid UTF-8 in a string (an overlong encoding (lead byte 0xC0 or 0xC1): 0xC0 0xAF) at byte 1");
  check_rejected("\"\xE0\x80\xAF\"", "invalid UTF-8 in a string (an overlong encoding: 0xE0 0x80) at byte 1");
  check_rejected("\"\xF0\x80\x80\xAF\"", "(an overlong encoding: 0xF0 0x80) at byte 1");
  check_rejected("\"\xED\xA0\x80\"", "(a UTF-16 surrogate encoded in UTF-8: 0xED 0xA0) at byte 1");
  check_rejected("\"\xED\xBF\xBF\"", "(a UTF-16 surrogate encoded in UTF-8");
  check_rejected("\"\xF4\x90\x80\x80\"", "(a code point beyond U+10FFFF: 0xF4 0x90) at byte 1");
  check_rejected("\"\xF5\x80\x80\x80\"", "(a lead byte above 0xF4 (code point beyond U+10FFFF): 0xF5) at byte 1");
  check_rejected("\"ab\xE2\x82\"", "(a truncated multi-byte sequence: 0xE2 0x82 0x22) at byte 3");
  check_rejected("\"\xE2\x82", "(a truncated multi-byte sequence: 0xE2 0x82) at byte 1");
  check_rejected("\"\x80\"", "(a continuation byte without a lead byte: 0x80) at byte 1");
  check_rejected("\xEF\xBB\xBF{}", "expected a value, found byte 0xEF at byte 0");  // a BOM is not JSON
}

TEST_CASE("json: structure errors carry the byte offset", "[io][json][errors]") {
  check_rejected("", "unexpected end of input at byte 0");
  check_rejected("   ", "unexpected end of input at byte 3");
  check_rejected("{} {}", "trailing characters after the value: '{' at byte 3");
  check_rejected("[1,]", "expected a value, found ']' at byte 3");
  check_rejected("[1 2]", "expected ']' or ',' after an array element, found '2' at byte 3");
  check_rejected(R"({"a":1,})", "expected a string key, found '}' at byte 7");
  check_rejected(R"({"a" 1})", "expected ':' after an object key, found '1' at byte 5");
  check_rejected(R"({a:1})", "expected a string key, found 'a' at byte 1");
  check_rejected(R"({"a":1,"b":2,"a":3})", "duplicate key \"a\" at byte 13");
  check_rejected("tru", "expected a value, found 't' at byte 0");
  check_rejected("nul", "expected a value, found 'n' at byte 0");
  check_rejected("[true false]", "expected ']' or ',' after an array element, found 'f' at byte 6");
  check_rejected("'a'", "expected a value, found ''' at byte 0");
  CHECK_THROWS_WITH(parse("[1,]"), Contains("test.json: malformed JSON"));
}

TEST_CASE("json: nesting to the limit parses, one deeper is refused naming the limit", "[io][json][errors]") {
  REQUIRE(io::kJsonMaxDepth == 512);
  const io::JsonValue deepest = parse(nested_arrays(io::kJsonMaxDepth));
  const io::JsonValue* v = &deepest;
  int depth = 0;
  while (v->kind == io::JsonValue::Kind::array && !v->array.empty()) v = &v->array[0], ++depth;
  CHECK(depth == io::kJsonMaxDepth - 1);  // the innermost array is empty
  CHECK_NOTHROW(io::validate_json(nested_arrays(io::kJsonMaxDepth), "t"));
  check_rejected(nested_arrays(io::kJsonMaxDepth + 1), "nesting deeper than the limit of 512 arrays and objects at byte 512");
  // What overflowed the stack before: 200,000 levels, objects and arrays mixed, and unterminated.
  std::string hostile;
  for (int i = 0; i < 100000; ++i) hostile += "{\"a\":[";
  check_rejected(hostile, "nesting deeper than the limit of 512 arrays and objects at byte 1536");  // the 257th {
}

TEST_CASE("json: values of every kind and an object's members", "[io][json]") {
  const io::JsonValue v = parse(R"( {"n": null, "t": true, "f": false, "s": "x", "a": [], "o": {"k": 1}} )");
  CHECK(v.kind == io::JsonValue::Kind::object);
  CHECK(v.at("n", "t").kind == io::JsonValue::Kind::null);
  CHECK(v.at("t", "t").boolean);
  CHECK(v.at("f", "t").kind == io::JsonValue::Kind::boolean);
  CHECK_FALSE(v.at("f", "t").boolean);
  CHECK(v.at("a", "t").array.empty());
  CHECK(v.at("o", "t").at("k", "t").integer == 1);
  CHECK_THROWS_WITH(v.at("missing", "ctx"), Contains("ctx: missing key \"missing\""));
}

TEST_CASE("json_quote escapes what it must and refuses invalid UTF-8", "[io][json][errors]") {
  CHECK(io::json_quote("a\"b\\\n\x01") == R"("a\"b\\\n\u0001")");
  const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80";
  CHECK(io::json_quote(text) == "\"" + text + "\"");
  CHECK(parse(io::json_quote(text)).string == text);
  CHECK_THROWS_WITH(io::json_quote("ab\xFF"), Contains("json_quote: string is not valid UTF-8 at byte 2 (a lead byte above 0xF4 (code point beyond U+10FFFF): 0xFF)"));
  CHECK_THROWS_WITH(io::json_quote("\xED\xA0\x80"), Contains("a UTF-16 surrogate encoded in UTF-8"));
}

TEST_CASE("read_json_file: the text of a valid file; every bad file an Error naming it", "[io][json][errors]") {
  megacpp::testing::TempDir dir;
  std::ofstream(dir / "state.json") << R"({"step": 3, "options": {"lr": 0.02}})";
  CHECK(io::read_json_file(dir / "state.json", "checkpoint") == R"({"step": 3, "options": {"lr": 0.02}})");
  std::ofstream(dir / "deep.json") << "{\"options\":" << nested_arrays(100000) << "}";
  CHECK_THROWS_WITH(io::read_json_file(dir / "deep.json", "checkpoint"),
                    Contains("checkpoint " + (dir / "deep.json").string() +
                             ": malformed JSON: nesting deeper than the limit of 512 arrays and objects at byte 522"));
  std::ofstream(dir / "empty.json");
  CHECK_THROWS_WITH(io::read_json_file(dir / "empty.json", "checkpoint"), Contains("unexpected end of input at byte 0"));
  std::filesystem::create_directory(dir / "dir.json");
  CHECK_THROWS_WITH(io::read_json_file(dir / "dir.json", "checkpoint"), Contains("dir.json is not a regular file (it is a directory)"));
  CHECK_THROWS_WITH(io::read_json_file(dir / "missing.json", "checkpoint"), Contains("checkpoint: cannot open") && Contains("missing.json"));
}
