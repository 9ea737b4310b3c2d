// Shared by the libFuzzer harnesses in tests/fuzz: the input as a file for the readers that map
// one, and the rule every harness enforces.
//
// The rule (docs/getting-started.md, "Fuzzing"): a reader either accepts an input or throws
// megacpp::Error naming the problem. Anything else is a finding and libFuzzer reports it: a
// sanitizer report (ASan, UBSan), a signal, a timeout, a standard exception escaping (libFuzzer
// aborts on it), or a property check below failing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace megacpp::fuzz {

/// A property the harness checks on an accepted input; a violation aborts with the message, so
/// libFuzzer saves the input as a crash.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

/// A file holding the current input, at a per-process path (libFuzzer's -fork and -jobs modes
/// run several processes in one directory); rewritten for every input, removed at exit.
class InputFile {
 public:
  explicit InputFile(const std::string& extension)
      : path_(std::filesystem::temp_directory_path() /
              ("megacpp_fuzz_" + std::to_string(::getpid()) + extension)) {}
  ~InputFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  /// Replaces the file's content with `size` bytes at `data`; returns the path.
  const std::filesystem::path& write(const std::uint8_t* data, std::size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    require(static_cast<bool>(out), "cannot write the input file (disk full?)");
    return path_;
  }
  /// Where the file is.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace megacpp::fuzz
