// examples/eval/harness.hpp: scores completions of C++ problems by compiling and running them.
//
// Each distinct (task, completion) is written to a fresh temporary directory with its problem's
// prompt and test, compiled with the configured compiler and, when that succeeds, run; it passes
// when the test program exits with status 0 within the limits (sandbox.hpp). `jobs` candidates
// are in flight at once (worker threads, each owning one sandbox slot). Identical completions of
// a task are compiled once and share the result. The report holds, per task, n samples and c
// passing, pass@k for every k the smallest n allows (megacpp/eval/pass_at_k.hpp), and CodeBLEU's
// n-gram components against the canonical solutions when every problem has one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/problems.hpp"
#include "eval/sandbox.hpp"
#include "megacpp/eval.hpp"

namespace megacpp::examples {

/// How candidates are built and run.
struct HarnessOptions {
  std::string compiler = "g++";                   ///< found in PATH unless it holds a '/'
  std::vector<std::string> compiler_flags = {"-std=c++17", "-O0", "-Werror=return-type"};  ///< before the source file (docs/eval.md)
  SandboxLimits compile_limits{60, 60, std::int64_t{2} << 30, std::int64_t{256} << 20, 64, true};  ///< the compiler's
  SandboxLimits run_limits;                       ///< the test binary's
  int jobs = 2;                                   ///< candidates in flight
  std::int64_t sandbox_uid_base = 1900000000;     ///< as root: slot s of process p runs as this + 1024 (p mod 2048) + s
};

/// The outcome of one candidate.
struct CandidateResult {
  std::string task_id;     ///< its problem
  std::size_t sample = 0;  ///< its index among the task's completions
  bool passed = false;     ///< the test program exited with 0 in time
  std::string status;      ///< passed | compile_error | failed | timeout | signal N | compile_timeout
  std::string detail;      ///< the first line of the output that explains a failure
  double seconds = 0;      ///< compile + run wall-clock time

  /// True when the program compiled (whatever its tests did).
  bool compiled() const { return status != "compile_error" && status != "compile_timeout"; }
};

/// One evaluation: every candidate's result and the scores.
struct EvalReport {
  std::vector<CandidateResult> results;                   ///< in completion order
  std::vector<std::pair<std::string, std::pair<std::int64_t, std::int64_t>>> per_task;  ///< task -> (n, c), problem order
  std::map<std::int64_t, double> pass_at_k;               ///< k -> mean pass@k over tasks
  std::optional<double> ngram_match, weighted_ngram_match;  ///< CodeBLEU components (none without references)
  std::size_t programs = 0;                               ///< distinct programs compiled
  bool network_isolated = true;                           ///< every run was in a fresh network namespace
  bool privileges_dropped = false;                        ///< runs used dedicated uids (root harness)
  double seconds = 0;                                     ///< wall-clock time of the evaluation

  /// The summary line: pass@k, CodeBLEU's components (syntax and data-flow match are not
  /// computed: null, and so the combined CodeBLEU), counts and time.
  nlohmann::json summary() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : pass_at_k) j["pass@" + std::to_string(k)] = v;
    std::int64_t samples = 0, min_n = per_task.empty() ? 0 : per_task.front().second.first;
    for (const auto& [task, nc] : per_task) {
      samples += nc.first;
      min_n = std::min(min_n, nc.first);
    }
    j["tasks"] = per_task.size();
    j["samples"] = samples;
    j["samples_per_task_min"] = min_n;
    j["ngram_match"] = ngram_match ? nlohmann::json(*ngram_match) : nlohmann::json();
    j["weighted_ngram_match"] = weighted_ngram_match ? nlohmann::json(*weighted_ngram_match) : nlohmann::json();
    j["syntax_match"] = nullptr;
    j["dataflow_match"] = nullptr;
    j["codebleu"] = nullptr;
    std::size_t built = 0;
    for (const auto& r : results) built += r.compiled();
    j["compile_rate"] = results.empty() ? 0.0 : static_cast<double>(built) / static_cast<double>(results.size());
    j["programs_compiled"] = programs;
    j["network_isolated"] = network_isolated;
    j["seconds"] = seconds;
    return j;
  }
};

namespace detail {
// The first non-blank line of `text` that names an error or assertion, else the first non-blank one.
inline std::string explaining_line(const std::string& text) {
  std::string first;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      if (first.empty()) first = line;
      if (line.find("error") != std::string::npos || line.find("Assertion") != std::string::npos) return line;
    }
    start = end + 1;
  }
  return first;
}

// Compiles and runs one program in slot `slot`; fills status, detail, passed, seconds.
inline CandidateResult run_candidate(const std::string& program, const std::filesystem::path& compiler,
                                     const HarnessOptions& o, std::optional<uid_t> uid, bool& network_isolated) {
  CandidateResult r;
  const TempDir dir(uid);
  {
    std::ofstream source(dir.path() / "candidate.cpp", std::ios::binary);
    source << program;
    check(source.good(), "megacpp-eval", "cannot write ", (dir.path() / "candidate.cpp").string());
  }
  std::vector<std::string> compile = {compiler.string()};
  compile.insert(compile.end(), o.compiler_flags.begin(), o.compiler_flags.end());
  compile.insert(compile.end(), {"candidate.cpp", "-o", "candidate"});
  const SandboxResult c = run_sandboxed(compile, dir.path(), o.compile_limits, uid);
  r.seconds = c.seconds;
  network_isolated = c.network_isolated;
  if (c.timed_out || c.exit_code != 0) {
    r.status = c.timed_out ? "compile_timeout" : "compile_error";
    r.detail = explaining_line(c.output);
    return r;
  }
  const SandboxResult run = run_sandboxed({(dir.path() / "candidate").string()}, dir.path(), o.run_limits, uid);
  r.seconds += run.seconds;
  network_isolated = network_isolated && run.network_isolated;
  r.passed = !run.timed_out && run.exit_code == 0;
  r.status = r.passed ? "passed" : run.timed_out ? "timeout" : run.signal ? "signal " + std::to_string(run.signal) : "failed";
  if (!r.passed) r.detail = explaining_line(run.output);
  if (run.signal == SIGXCPU) r.status = "timeout";  // RLIMIT_CPU
  return r;
}
}  // namespace detail

/// Compiles and runs every completion against its problem; never throws for anything a candidate
/// does (only for a harness that cannot work: no compiler, no temporary directory).
inline EvalReport evaluate_completions(const std::vector<Problem>& problems, const std::vector<Completion>& completions,
                                       const HarnessOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  check(o.jobs >= 1 && o.jobs <= 1024, "megacpp-eval", "jobs must be in [1, 1024] (one sandbox uid each), got ", o.jobs);
  const std::filesystem::path compiler = find_program(o.compiler);
  std::map<std::string, const Problem*> by_id;
  for (const auto& p : problems) by_id[p.task_id] = &p;
  // Distinct programs, each run once.
  std::map<std::pair<std::string, std::string>, std::size_t> program_index;
  std::vector<std::pair<const Problem*, const std::string*>> programs;
  std::vector<std::size_t> program_of(completions.size());
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto it = by_id.find(completions[i].task_id);
    check(it != by_id.end(), "megacpp-eval", "completion ", i, " names unknown task \"", completions[i].task_id, "\"");
    const auto [pos, inserted] = program_index.try_emplace({completions[i].task_id, completions[i].completion}, programs.size());
    if (inserted) programs.emplace_back(it->second, &completions[i].completion);
    program_of[i] = pos->second;
  }
  EvalReport report;
  report.privileges_dropped = ::geteuid() == 0;
  std::vector<CandidateResult> outcomes(programs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> isolated{true};
  std::mutex error_mutex;
  std::string error;
  const auto worker = [&](int slot) {
    // A uid range per harness process, so two harnesses on one machine do not kill each other's
    // candidates in their cleanup (two pids equal modulo 2048 still share one).
    const std::int64_t range = o.sandbox_uid_base + 1024 * (::getpid() % 2048);
    const std::optional<uid_t> uid =
        report.privileges_dropped ? std::optional<uid_t>(static_cast<uid_t>(range + slot)) : std::nullopt;
    for (std::size_t i = next++; i < programs.size(); i = next++) {
      try {
        bool net = false;
        outcomes[i] = detail::run_candidate(programs[i].first->program(*programs[i].second), compiler, o, uid, net);
        if (!net) isolated = false;
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (error.empty()) error = e.what();
      }
    }
  };
  std::vector<std::thread> workers;
  for (int s = 0; s < std::min<int>(o.jobs, static_cast<int>(programs.size())); ++s) workers.emplace_back(worker, s);
  for (auto& w : workers) w.join();
  check(error.empty(), "megacpp-eval", error);
  report.network_isolated = isolated;
  report.programs = programs.size();

  std::map<std::string, std::size_t> sample_count;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> nc;
  std::vector<eval::BleuPair> pairs;
  bool all_have_reference = true;
  for (const auto& p : problems) all_have_reference = all_have_reference && !p.canonical_solution.empty();
  for (std::size_t i = 0; i < completions.size(); ++i) {
    CandidateResult r = outcomes[program_of[i]];
    r.task_id = completions[i].task_id;
    r.sample = sample_count[r.task_id]++;
    auto& counts = nc[r.task_id];
    ++counts.first;
    counts.second += r.passed;
    report.results.push_back(std::move(r));
    if (all_have_reference)
      pairs.push_back({eval::cpp_tokens(completions[i].completion), eval::cpp_tokens(by_id[completions[i].task_id]->canonical_solution)});
  }
  std::int64_t min_n = -1;
  for (const auto& p : problems)
    if (nc.count(p.task_id)) {
      report.per_task.emplace_back(p.task_id, nc[p.task_id]);
      min_n = min_n < 0 ? nc[p.task_id].first : std::min(min_n, nc[p.task_id].first);
    }
  for (const std::int64_t k : eval::reportable_ks(min_n)) {
    double sum = 0;
    for (const auto& [task, counts] : report.per_task) sum += eval::pass_at_k(counts.first, counts.second, k);
    report.pass_at_k[k] = sum / static_cast<double>(report.per_task.size());
  }
  if (all_have_reference && !pairs.empty()) {
    report.ngram_match = eval::ngram_match(pairs);
    report.weighted_ngram_match = eval::weighted_ngram_match(pairs);
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace megacpp::examples
