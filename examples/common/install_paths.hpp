// examples/common/install_paths.hpp: where a tool finds the files installed beside it.
//
// `cmake --install` (MEGACPP_INSTALL_TOOLS) puts the tools in <prefix>/bin, the built-in corpus
// in <prefix>/share/megacpp/corpus and megacpp-eval's problems in <prefix>/share/megacpp/eval. An installed tool finds that corpus relative to its own
// executable (/proc/self/exe: the project supports Linux only), so the prefix can be moved; a tool
// run from the build tree falls back to the corpus directory compiled in at build time.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace megacpp::examples {

/// <prefix>/share/megacpp/corpus when this executable lives in <prefix>/bin and that directory
/// exists, else `build_tree_corpus`.
inline std::string default_corpus_dir(const std::string& build_tree_corpus) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "megacpp" / "corpus";
    if (exe.parent_path().filename() == "bin" && std::filesystem::is_directory(installed, ec)) return installed.string();
  }
  return build_tree_corpus;
}

/// <prefix>/share/megacpp/eval/megacpp_cpp20.jsonl when this executable lives in <prefix>/bin and
/// that file exists, else `build_tree_problems` (the shipped problem set of megacpp-eval).
inline std::string default_eval_problems(const std::string& build_tree_problems) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed =
        exe.parent_path().parent_path() / "share" / "megacpp" / "eval" / "megacpp_cpp20.jsonl";
    if (exe.parent_path().filename() == "bin" && std::filesystem::is_regular_file(installed, ec)) return installed.string();
  }
  return build_tree_problems;
}

}  // namespace megacpp::examples
