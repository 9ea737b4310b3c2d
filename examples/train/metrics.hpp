// examples/train/metrics.hpp: the JSONL metrics log and the SVG loss curve drawn from it.
//
// metrics.jsonl gets one object per line: {"step", "loss", "lr", "grad_norm", "tokens",
// "tokens_per_s"} for training steps and {"step", "val_loss", "val_bpb"} for evaluations.
// "loss" is the next-token loss; a model with MTP adds "mtp_weight" (lambda of the step) and, when
// lambda > 0, "mtp_loss" (the MTP cross-entropy before lambda; the step minimised loss + lambda
// mtp_loss).
// On resume the log is cut back to the checkpoint's step first, so steps a killed run logged
// after its last checkpoint are not counted twice. loss.svg plots both series (train loss as a
// thin line, validation as points joined by a thick line) against the step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/core/error.hpp"
#include "megacpp/io/atomic_file.hpp"

namespace megacpp::examples {

/// Appends JSON lines to OUT/metrics.jsonl.
class MetricsLog {
 public:
  /// Opens `path` for appending; with `resume_step` >= 0 first drops lines with step > resume_step.
  MetricsLog(std::filesystem::path path, std::int64_t resume_step) : path_(std::move(path)) {
    if (resume_step >= 0 && std::filesystem::exists(path_)) {
      std::ifstream in(path_);
      std::string kept, line;
      while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("step", std::int64_t{0}) <= resume_step) kept += line + "\n";
      }
      io::atomic_write(path_, std::span<const char>(kept.data(), kept.size()));
    } else if (resume_step < 0) {
      std::ofstream(path_, std::ios::trunc);
    }
    out_.open(path_, std::ios::app);
    check(out_.is_open(), "metrics", "cannot open ", path_.string(), " for writing");
  }
  /// Writes one record and flushes (a killed run keeps everything it logged); a failed write
  /// (disk full, file removed from under a read-only mount) throws instead of losing the record.
  void write(const nlohmann::json& record) {
    out_ << record.dump() << "\n";
    out_.flush();
    check(out_.good(), "metrics", "cannot write to ", path_.string());
  }
  /// Path of the log.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

namespace detail {
struct Series {
  std::vector<double> x, y;
};
inline std::string svg_polyline(const Series& s, double x0, double x1, double y0, double y1, const char* style) {
  std::ostringstream os;
  os << "<polyline fill=\"none\" " << style << " points=\"";
  for (std::size_t i = 0; i < s.x.size(); ++i)
    os << 60 + (s.x[i] - x0) / (x1 - x0) * 560 << "," << 330 - (s.y[i] - y0) / (y1 - y0) * 300 << " ";
  os << "\"/>\n";
  return os.str();
}
}  // namespace detail

/// Draws train and validation loss from the JSONL log at `metrics` into `svg` (atomically).
/// Returns the number of points plotted.
inline std::size_t write_loss_plot(const std::filesystem::path& metrics, const std::filesystem::path& svg,
                                   const std::string& title) {
  detail::Series train, val;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) continue;
    const double step = j["step"].get<double>();
    if (j.contains("loss") && std::isfinite(j["loss"].get<double>())) {
      train.x.push_back(step);
      train.y.push_back(j["loss"].get<double>());
    }
    if (j.contains("val_loss") && std::isfinite(j["val_loss"].get<double>())) {
      val.x.push_back(step);
      val.y.push_back(j["val_loss"].get<double>());
    }
  }
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto* s : {&train, &val})
    for (std::size_t i = 0; i < s->x.size(); ++i) {
      x0 = std::min(x0, s->x[i]);
      x1 = std::max(x1, s->x[i]);
      y0 = std::min(y0, s->y[i]);
      y1 = std::max(y1, s->y[i]);
    }
  if (train.x.empty() && val.x.empty()) x0 = y0 = 0, x1 = y1 = 1;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  y0 = std::max(0.0, y0 - 0.05 * (y1 - y0));
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"380\" font-family=\"monospace\" font-size=\"11\">\n"
     << "<rect width=\"640\" height=\"380\" fill=\"white\"/>\n"
     << "<text x=\"60\" y=\"20\" font-size=\"13\">" << title << "</text>\n"
     << "<line x1=\"60\" y1=\"330\" x2=\"620\" y2=\"330\" stroke=\"black\"/>\n"
     << "<line x1=\"60\" y1=\"30\" x2=\"60\" y2=\"330\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + (y1 - y0) * i / 4, x = x0 + (x1 - x0) * i / 4;
    os << "<text x=\"5\" y=\"" << 334 - 75 * i << "\">" << std::round(y * 1000) / 1000 << "</text>\n"
       << "<line x1=\"60\" y1=\"" << 330 - 75 * i << "\" x2=\"620\" y2=\"" << 330 - 75 * i << "\" stroke=\"#ddd\"/>\n"
       << "<text x=\"" << 50 + 140 * i << "\" y=\"348\">" << std::llround(x) << "</text>\n";
  }
  os << "<text x=\"300\" y=\"370\">step</text>\n"
     << detail::svg_polyline(train, x0, x1, y0, y1, "stroke=\"#4878d0\" stroke-width=\"1\"")
     << detail::svg_polyline(val, x0, x1, y0, y1, "stroke=\"#d65f5f\" stroke-width=\"2.5\"")
     << "<text x=\"470\" y=\"45\" fill=\"#4878d0\">train loss (nats)</text>\n"
     << "<text x=\"470\" y=\"60\" fill=\"#d65f5f\">val loss (nats)</text>\n</svg>\n";
  const std::string text = os.str();
  io::atomic_write(svg, std::span<const char>(text.data(), text.size()));
  return train.x.size() + val.x.size();
}

}  // namespace megacpp::examples
