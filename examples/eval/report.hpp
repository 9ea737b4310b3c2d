// examples/eval/report.hpp: megacpp-eval's per-task lines and its per-candidate results file.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/harness.hpp"
#include "megacpp/io/atomic_file.hpp"

namespace megacpp::examples {

/// One line per task: "task: c/n passed", with the first failing sample's status and the line of
/// output that explains it; then how the candidates were isolated.
inline void print_report(const EvalReport& report, std::FILE* out) {
  for (const auto& [task, nc] : report.per_task) {
    std::string why;
    for (const auto& r : report.results)
      if (r.task_id == task && !r.passed) {
        why = "  first failure (sample " + std::to_string(r.sample) + "): " + r.status;
        if (!r.detail.empty()) why += ": " + r.detail.substr(0, 160);
        break;
      }
    std::fprintf(out, "%s: %lld/%lld passed%s\n", task.c_str(), static_cast<long long>(nc.second),
                 static_cast<long long>(nc.first), why.c_str());
  }
  std::fprintf(out, "sandbox: %zu distinct programs compiled and run in %.1f s; network %s; %s\n", report.programs,
               report.seconds, report.network_isolated ? "isolated (fresh network namespace)" : "NOT isolated",
               report.privileges_dropped ? "each run as a dedicated unprivileged uid (RLIMIT_NPROC enforced)"
                                         : "runs as the invoking user (RLIMIT_NPROC counts all of its processes)");
  std::fflush(out);
}

/// Writes every candidate as {"task_id", "sample", "completion", "passed", "status", "detail",
/// "seconds"} per line (human-eval's *_results.jsonl, with the reason of a failure).
inline void write_results(const EvalReport& report, const std::vector<Completion>& completions,
                          const std::filesystem::path& path) {
  std::string text;
  for (std::size_t i = 0; i < report.results.size(); ++i) {
    const auto& r = report.results[i];
    text += nlohmann::json{{"task_id", r.task_id}, {"sample", r.sample}, {"completion", completions[i].completion},
                           {"passed", r.passed}, {"status", r.status}, {"detail", r.detail}, {"seconds", r.seconds}}
                .dump() +
            "\n";
  }
  io::atomic_write(path, std::span<const char>(text.data(), text.size()));
}

}  // namespace megacpp::examples
