// examples/train/metrics.hpp: the JSONL metrics log and the SVG loss curve drawn from it.
//
// metrics.jsonl gets one object per line: {"step", "loss", "learned_tokens", "lr" (each optimizer
// group's scheduled learning rate), "grad_norm", "tokens", "tokens_per_s", "elapsed_s" (since the
// process started training), "time" (Unix seconds)} for training steps, with "loss" and
// "grad_norm" null on a step that had no learned target, and {"step", "val_loss", "val_bpb",
// "elapsed_s", "time"} for evaluations. "loss" is the next-token loss; a model with MTP adds
// "mtp_weight" (lambda of the step) and, when lambda > 0, "mtp_loss" (the MTP cross-entropy before
// lambda; the step minimised loss + lambda mtp_loss).
// On resume the log is cut back to the checkpoint's step first, so steps a killed run logged
// after its last checkpoint are not counted twice. loss.svg plots both series against the step
// (write_loss_plot below). With --eval_pass_every, pass@k records {"step", "pass@1", ...,
// "ngram_match", ...} (pass_eval_run.hpp) go to the same log and pass.svg plots pass@1
// (write_metric_plot).
#pragma once

#include <algorithm>
#include <chrono>
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

/// Wall-clock time as Unix seconds (with fractions), for the metrics' "time".
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

// Maps data coordinates to the plot area (60..620 across, 330..30 up).
struct PlotFrame {
  double x0, x1, y0, y1;
  double px(double x) const { return 60 + (x - x0) / (x1 - x0) * 560; }
  double py(double y) const { return 330 - (y - y0) / (y1 - y0) * 300; }
};

inline std::string svg_polyline(const Series& s, const PlotFrame& f, const char* style) {
  std::ostringstream os;
  os << "<polyline fill=\"none\" " << style << " points=\"";
  for (std::size_t i = 0; i < s.x.size(); ++i) os << f.px(s.x[i]) << "," << f.py(s.y[i]) << " ";
  os << "\"/>\n";
  return os.str();
}

// A "nice" tick spacing for `range` split into about `count` parts: 1, 2 or 5 times a power of
// ten (Heckbert, "Nice numbers for graph labels", Graphics Gems, 1990).
inline double nice_step(double range, int count) {
  const double raw = range / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
}

// The tick label of `v` on a grid of spacing `step`: as many decimals as the spacing has.
inline std::string tick_label(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(decimals);
  os << (std::abs(v) < step * 1e-9 ? 0.0 : v);
  return os.str();
}

// Exponential moving average of `s` (debiased as in Adam, so the first points are not pulled to 0).
inline Series smoothed(const Series& s, double alpha) {
  Series out = s;
  double average = 0, weight = 0;
  for (std::size_t i = 0; i < s.y.size(); ++i) {
    average = alpha * average + (1 - alpha) * s.y[i];
    weight = alpha * weight + (1 - alpha);
    out.y[i] = average / weight;
  }
  return out;
}
// The plot's page, title, grid with tick labels every `ystep` from f.y0 to f.y1 and every `xstep`
// from f.x0 to f.x1, both axes and the "step" label: what the loss and metric plots share.
inline void svg_frame(std::ostream& os, const PlotFrame& f, const std::string& title, double xstep, double ystep) {
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"380\" font-family=\"monospace\" font-size=\"11\">\n"
     << "<rect width=\"640\" height=\"380\" fill=\"white\"/>\n"
     << "<text x=\"60\" y=\"20\" font-size=\"13\">" << title << "</text>\n";
  for (double y = f.y0; y <= f.y1 + ystep * 1e-6; y += ystep)
    os << "<line x1=\"60\" y1=\"" << f.py(y) << "\" x2=\"620\" y2=\"" << f.py(y) << "\" stroke=\"#ddd\"/>\n"
       << "<text x=\"55\" y=\"" << f.py(y) + 4 << "\" text-anchor=\"end\">" << tick_label(y, ystep) << "</text>\n";
  for (double x = f.x0; x <= f.x1 + xstep * 1e-6; x += xstep)
    os << "<text x=\"" << f.px(x) << "\" y=\"346\" text-anchor=\"middle\">" << tick_label(x, xstep) << "</text>\n";
  os << "<line x1=\"60\" y1=\"330\" x2=\"620\" y2=\"330\" stroke=\"black\"/>\n"
     << "<line x1=\"60\" y1=\"30\" x2=\"60\" y2=\"330\" stroke=\"black\"/>\n"
     << "<text x=\"340\" y=\"370\" text-anchor=\"middle\">step</text>\n";
}

}  // namespace detail

/// Draws train and validation loss from the JSONL log at `metrics` into `svg` (atomically):
/// axes with round ticks, the train loss as a thin line (steps without a loss are skipped), its
/// exponential moving average with factor `smoothing` (0: none) as a thicker line, and the
/// validation loss as marked points joined by a line. Returns the number of points plotted.
inline std::size_t write_loss_plot(const std::filesystem::path& metrics, const std::filesystem::path& svg,
                                   const std::string& title, double smoothing = 0.9) {
  detail::Series train, val;
  std::ifstream in(metrics);
  std::string line;
  const auto number = [](const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number() && std::isfinite(it->get<double>());
  };
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !number(j, "step")) continue;
    const double step = j["step"].get<double>();
    if (number(j, "loss")) {
      train.x.push_back(step);
      train.y.push_back(j["loss"].get<double>());
    }
    if (number(j, "val_loss")) {
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
  // The axes start and end on round ticks.
  const double ystep = detail::nice_step(y1 - y0, 5), xstep = std::max(1.0, detail::nice_step(x1 - x0, 5));
  y0 = std::max(0.0, std::floor(y0 / ystep) * ystep);
  y1 = std::ceil(y1 / ystep) * ystep;
  x0 = std::floor(x0 / xstep) * xstep;
  x1 = std::ceil(x1 / xstep) * xstep;
  const detail::PlotFrame f{x0, x1, y0, y1};
  std::ostringstream os;
  detail::svg_frame(os, f, title, xstep, ystep);
  os << detail::svg_polyline(train, f, "stroke=\"#a6bddb\" stroke-width=\"1\"");
  if (smoothing > 0 && train.x.size() > 1)
    os << detail::svg_polyline(detail::smoothed(train, smoothing), f, "stroke=\"#2b5797\" stroke-width=\"2\"");
  os << detail::svg_polyline(val, f, "stroke=\"#d65f5f\" stroke-width=\"1.5\"");
  for (std::size_t i = 0; i < val.x.size(); ++i)
    os << "<circle cx=\"" << f.px(val.x[i]) << "\" cy=\"" << f.py(val.y[i]) << "\" r=\"3.5\" fill=\"#d65f5f\"/>\n";
  os << "<text x=\"470\" y=\"45\" fill=\"#a6bddb\">train loss (nats)</text>\n";
  if (smoothing > 0) os << "<text x=\"470\" y=\"60\" fill=\"#2b5797\">train, EMA " << smoothing << "</text>\n";
  os << "<text x=\"470\" y=\"75\" fill=\"#d65f5f\">val loss (nats)</text>\n</svg>\n";
  const std::string text = os.str();
  io::atomic_write(svg, std::span<const char>(text.data(), text.size()));
  return train.x.size() + val.x.size();
}

/// Draws one metric of the JSONL log at `metrics` (the records that hold a finite number under
/// `key`, against their "step") into `svg` (atomically), as marked points joined by a line, on a
/// y axis from 0 to the next round tick above the largest value (at least 1: pass@k is a
/// fraction). Returns the number of points plotted.
inline std::size_t write_metric_plot(const std::filesystem::path& metrics, const std::filesystem::path& svg,
                                     const std::string& title, const std::string& key) {
  detail::Series series;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step") || !j["step"].is_number() || !j.contains(key) || !j[key].is_number())
      continue;
    const double y = j[key].get<double>();
    if (!std::isfinite(y)) continue;
    series.x.push_back(j["step"].get<double>());
    series.y.push_back(y);
  }
  double x0 = series.x.empty() ? 0 : *std::min_element(series.x.begin(), series.x.end());
  double x1 = series.x.empty() ? 1 : *std::max_element(series.x.begin(), series.x.end());
  double y1 = series.y.empty() ? 1 : std::max(1.0, *std::max_element(series.y.begin(), series.y.end()));
  if (x1 <= x0) x1 = x0 + 1;
  const double ystep = detail::nice_step(y1, 5), xstep = std::max(1.0, detail::nice_step(x1 - x0, 5));
  y1 = std::ceil(y1 / ystep) * ystep;
  x0 = std::floor(x0 / xstep) * xstep;
  x1 = std::ceil(x1 / xstep) * xstep;
  const detail::PlotFrame f{x0, x1, 0.0, y1};
  std::ostringstream os;
  detail::svg_frame(os, f, title, xstep, ystep);
  os << detail::svg_polyline(series, f, "stroke=\"#2b8a3e\" stroke-width=\"1.5\"");
  for (std::size_t i = 0; i < series.x.size(); ++i)
    os << "<circle cx=\"" << f.px(series.x[i]) << "\" cy=\"" << f.py(series.y[i]) << "\" r=\"3.5\" fill=\"#2b8a3e\"/>\n";
  os << "<text x=\"470\" y=\"45\" fill=\"#2b8a3e\">" << key << "</text>\n</svg>\n";
  const std::string text = os.str();
  io::atomic_write(svg, std::span<const char>(text.data(), text.size()));
  return series.x.size();
}

}  // namespace megacpp::examples
