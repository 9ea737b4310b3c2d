// bench/json_line.hpp: the one-line machine-readable summary every bench binary ends with
// (STYLE.md rule 8); shared by the CPU benches (bench_common.hpp) and the CUDA ones
// (cuda_bench.cuh), which cannot include the CPU backend.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace megacpp::bench {

// {"bench":"name","key":value,...} on one line: the last line of every bench's output.
class JsonLine {
 public:
  explicit JsonLine(std::string_view bench) { text_ = "{\"bench\":\"" + std::string(bench) + "\""; }
  JsonLine& add(std::string_view key, double value, int decimals = 2) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
    return raw(key, buf);
  }
  JsonLine& add(std::string_view key, long long value) { return raw(key, std::to_string(value)); }
  JsonLine& add(std::string_view key, int value) { return raw(key, std::to_string(value)); }
  JsonLine& add(std::string_view key, std::string_view value) {
    std::string quoted(1, '"');  // appended piece by piece: GCC 12's -Wrestrict misfires on "\"" + s + "\""
    quoted.append(value);
    quoted += '"';
    return raw(key, quoted);
  }
  void print() const { std::printf("%s}\n", text_.c_str()); }

 private:
  JsonLine& raw(std::string_view key, const std::string& value) {
    text_ += ",\"" + std::string(key) + "\":" + value;
    return *this;
  }
  std::string text_;
};

}  // namespace megacpp::bench
