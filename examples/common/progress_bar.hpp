// examples/common/progress_bar.hpp: a one-line terminal progress bar with rate and ETA.
//
// Redraws in place with '\r' when stderr is a terminal; otherwise (CI logs, pipes) prints a
// plain line at most every few seconds, so logs stay readable.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace megacpp::examples {

class ProgressBar {
 public:
  ProgressBar(std::string label, double total, std::string unit)
      : label_(std::move(label)), unit_(std::move(unit)), total_(total), start_(Clock::now()),
        last_print_(start_), interactive_(::isatty(STDERR_FILENO) != 0) {}

  /// Sets progress to `done` (of total) with extra text (loss, lr, ...) after the bar.
  void update(double done, const std::string& extra = "") {
    const auto now = Clock::now();
    const double since_print = std::chrono::duration<double>(now - last_print_).count();
    if (done < total_ && since_print < (interactive_ ? 0.1 : 5.0)) return;
    last_print_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? done / elapsed : 0;
    const double eta = rate > 0 ? (total_ - done) / rate : 0;
    const double frac = total_ > 0 ? done / total_ : 1;
    constexpr int kWidth = 24;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < static_cast<int>(frac * kWidth) && i < kWidth; ++i) bar[i] = '#';
    std::fprintf(stderr, "%s%s [%s] %5.1f%% %s %.3g %s/s ETA %s%s", interactive_ ? "\r" : "", label_.c_str(), bar.c_str(),
                 100 * frac, format_count(done).c_str(), rate, unit_.c_str(), format_time(eta).c_str(), extra.c_str());
    if (!interactive_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }
  /// Ends the bar's line.
  void finish() {
    if (interactive_) std::fputc('\n', stderr);
  }

  static std::string format_time(double seconds) {
    const int s = static_cast<int>(seconds + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%d:%02d", s / 60, s % 60);
    return buf;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string format_count(double n) {
    char buf[32];
    if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
    else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
    else std::snprintf(buf, sizeof buf, "%.0f", n);
    return buf;
  }

  std::string label_, unit_;
  double total_;
  Clock::time_point start_, last_print_;
  bool interactive_;
};

}  // namespace megacpp::examples
