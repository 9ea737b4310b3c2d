// examples/eval/problems.hpp: HumanEval-style C++ problems and completions, read from JSONL.
//
// A problem file has one JSON object per line (blank lines skipped), the fields of HumanEval-X's
// and MultiPL-E's C++ sets: "task_id" and "prompt" and "test" (strings, required),
// "entry_point" and "canonical_solution" (optional). The program compiled for a completion is
//
//   prompt + completion + "\n" + test
//
// which is both conventions at once: in HumanEval-X the completion closes the function and the
// test brings main(); in MultiPL-E the test itself starts with the function's closing "}".
// A completions file has one {"task_id", "completion"} object per line, several lines per task for
// k > 1 samples (human-eval's sample format). Every malformed line is an Error naming file:line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/core/error.hpp"

namespace megacpp::examples {

/// One problem: the prompt a model continues and the test program that checks it.
struct Problem {
  std::string task_id;             ///< unique name ("megacpp/3", "HumanEval/0")
  std::string prompt;              ///< includes, a comment and the function's signature up to its body
  std::string test;                ///< appended after the completion: main() with the asserts
  std::string entry_point;         ///< the function's name ("" if the file has none)
  std::string canonical_solution;  ///< a reference completion ("" if the file has none)

  /// True when the test starts by closing the function (MultiPL-E), so a completion must not.
  bool test_closes_function() const {
    const auto first = test.find_first_not_of(" \t\r\n");
    return first != std::string::npos && test[first] == '}';
  }
  /// The source file compiled for `completion`.
  std::string program(const std::string& completion) const { return prompt + completion + "\n" + test; }
};

/// One sampled completion of a problem.
struct Completion {
  std::string task_id;     ///< the problem it completes
  std::string completion;  ///< the text appended to the problem's prompt
};

namespace detail {
// Calls f(json, line_number) for every non-blank line of a JSONL file; errors name file:line.
template <class F>
void for_each_jsonl(const std::filesystem::path& path, const char* what, F&& f) {
  check(std::filesystem::is_regular_file(path), "megacpp-eval", what, " file ", path.string(), " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  check(in.is_open(), "megacpp-eval", "cannot open ", what, " file ", path.string());
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    check(!j.is_discarded() && j.is_object(), "megacpp-eval", path.string(), ":", number, ": not a JSON object");
    f(j, number);
  }
  check(!in.bad(), "megacpp-eval", "cannot read ", path.string());
}

inline std::string string_field(const nlohmann::json& j, const char* key, bool required, const std::filesystem::path& path,
                                std::int64_t line) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    check(!required, "megacpp-eval", path.string(), ":", line, ": missing \"", key, "\"");
    return {};
  }
  check(it->is_string(), "megacpp-eval", path.string(), ":", line, ": \"", key, "\" is not a string");
  return it->get<std::string>();
}
}  // namespace detail

/// The problems of a HumanEval-style C++ JSONL file, in file order; refuses an empty file and a
/// task_id given twice.
inline std::vector<Problem> read_problems(const std::filesystem::path& path) {
  std::vector<Problem> problems;
  std::set<std::string> seen;
  detail::for_each_jsonl(path, "problems", [&](const nlohmann::json& j, std::int64_t line) {
    Problem p;
    p.task_id = detail::string_field(j, "task_id", true, path, line);
    p.prompt = detail::string_field(j, "prompt", true, path, line);
    p.test = detail::string_field(j, "test", true, path, line);
    p.entry_point = detail::string_field(j, "entry_point", false, path, line);
    p.canonical_solution = detail::string_field(j, "canonical_solution", false, path, line);
    check(!p.task_id.empty(), "megacpp-eval", path.string(), ":", line, ": empty task_id");
    check(seen.insert(p.task_id).second, "megacpp-eval", path.string(), ":", line, ": task_id \"", p.task_id,
          "\" appears twice");
    problems.push_back(std::move(p));
  });
  check(!problems.empty(), "megacpp-eval", "problems file ", path.string(), " holds no problem");
  return problems;
}

/// The completions of a JSONL file, each checked to name one of `problems`; refuses an empty file
/// and a problem left without any completion (pass@k over a subset would not be comparable).
inline std::vector<Completion> read_completions(const std::filesystem::path& path, const std::vector<Problem>& problems) {
  std::set<std::string> known, attempted;
  for (const auto& p : problems) known.insert(p.task_id);
  std::vector<Completion> out;
  detail::for_each_jsonl(path, "completions", [&](const nlohmann::json& j, std::int64_t line) {
    Completion c;
    c.task_id = detail::string_field(j, "task_id", true, path, line);
    c.completion = detail::string_field(j, "completion", true, path, line);
    check(known.count(c.task_id), "megacpp-eval", path.string(), ":", line, ": task_id \"", c.task_id,
          "\" is not in the problems file");
    attempted.insert(c.task_id);
    out.push_back(std::move(c));
  });
  check(!out.empty(), "megacpp-eval", "completions file ", path.string(), " holds no completion");
  std::size_t missing = 0;
  std::string first_missing;
  for (const auto& p : problems)
    if (!attempted.count(p.task_id) && missing++ == 0) first_missing = p.task_id;
  check(missing == 0, "megacpp-eval", path.string(), ": ", missing, " of ", problems.size(),
        " problems have no completion (the first: \"", first_missing, "\"); every problem needs at least one");
  return out;
}

/// Cuts a sampled continuation of a problem's prompt to the function body: at the first line that
/// starts with "}" (the function's closing brace at column 0, as the prompts are written), keeping
/// that brace unless the problem's test brings it (MultiPL-E). `complete` says whether such a
/// line was found (if not, the whole text is returned: it will most likely not compile).
inline std::string truncate_completion(const std::string& text, const Problem& problem, bool& complete) {
  std::size_t close = text.rfind("}", 0) == 0 ? 0 : std::string::npos;
  if (close == std::string::npos) {
    const std::size_t at = text.find("\n}");
    if (at != std::string::npos) close = at + 1;
  }
  complete = close != std::string::npos;
  if (!complete) return text;
  return problem.test_closes_function() ? text.substr(0, close) : text.substr(0, close + 1) + "\n";
}

}  // namespace megacpp::examples
