// libFuzzer harness: the JSON reader (megacpp/io/json_value.hpp) that reads safetensors headers.
//
// Input: any bytes, parsed as one JSON document. An accepted document must survive a round trip:
// written back with json_quote (the writer's own escaping) and parsed again, it is the same value.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fuzz/fuzz_input.hpp"
#include "megacpp/io/json_value.hpp"

namespace {

using megacpp::io::JsonValue;

std::string write_json(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::null: return "null";
    case JsonValue::Kind::boolean: return v.boolean ? "true" : "false";
    case JsonValue::Kind::integer: return std::to_string(v.integer);
    case JsonValue::Kind::number: {
      // Shortest text that reads back to the same double; a fraction keeps it a number, not an integer.
      char text[64];
      const auto end = std::to_chars(text, text + sizeof(text), v.number).ptr;
      std::string out(text, end);
      if (out.find_first_of(".e") == std::string::npos) out += ".0";
      return out;
    }
    case JsonValue::Kind::string: return megacpp::io::json_quote(v.string);
    case JsonValue::Kind::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < v.array.size(); ++i) out.append(i ? "," : "").append(write_json(v.array[i]));
      return out + "]";
    }
    case JsonValue::Kind::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, member] : v.object) {
        out.append(first ? "" : ",").append(megacpp::io::json_quote(key)).append(":").append(write_json(member));
        first = false;
      }
      return out + "}";
    }
  }
  return "";
}

bool same(const JsonValue& a, const JsonValue& b) {
  if (a.kind != b.kind || a.boolean != b.boolean || a.integer != b.integer || a.number != b.number ||
      a.string != b.string ||
      a.array.size() != b.array.size() || a.object.size() != b.object.size())
    return false;
  for (std::size_t i = 0; i < a.array.size(); ++i)
    if (!same(a.array[i], b.array[i])) return false;
  for (auto ia = a.object.begin(), ib = b.object.begin(); ia != a.object.end(); ++ia, ++ib)
    if (ia->first != ib->first || !same(ia->second, ib->second)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  JsonValue value;
  try {
    value = megacpp::io::parse_json(text, "fuzz input");
  } catch (const megacpp::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  const std::string written = write_json(value);
  JsonValue again;
  try {
    again = megacpp::io::parse_json(written, "fuzz round trip");
  } catch (const megacpp::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    megacpp::fuzz::require(false, "an accepted document, written back with json_quote, is rejected");
  }
  megacpp::fuzz::require(same(value, again), "an accepted document changes in a write/parse round trip");
  return 0;
}
