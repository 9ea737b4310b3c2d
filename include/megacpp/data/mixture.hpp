// megacpp/data/mixture.hpp: training rows drawn from named token streams with given weights.
//
// megacpp-prepare writes one stream (train_000000.bin ...) or several named ones
// (train_code_000000.bin, train_text_000000.bin, ...; names are lowercase letters and digits, so
// the stream of a file name is unambiguous). MixtureLoader reads each named stream in order, as
// ShardLoader reads one, and fills every row from one stream, chosen by a weighted draw from an
// Rng seeded by the run's seed: over many rows each stream's share of the rows approaches its
// weight. A row is still seq + 1 consecutive tokens of its stream, so packing and the documents
// derived from BOS are those of a single stream. The loader's whole state is the Rng and each
// stream's position (MixturePosition), so a checkpoint resumes the exact rows. Data with a single
// unnamed stream is read by one ShardLoader exactly as before (whole steps of consecutive rows).
// A mixture is for one process (world 1): the trainer does not shard rows across ranks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/core/random.hpp"
#include "megacpp/data/loader.hpp"

namespace megacpp::data {

/// One stream's share of the rows.
struct StreamWeight {
  std::string stream;  ///< stream name (lowercase letters and digits)
  double weight = 0;   ///< share of the rows, in [0, 1]
};

/// Weights of a mixture, in the order given; they sum to 1.
using Mixture = std::vector<StreamWeight>;

/// True for a stream name megacpp-prepare accepts: 1-32 lowercase letters and digits.
inline bool valid_stream_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (const char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

/// "code=0.7,text=0.2,math=0.1" for a mixture (%g weights).
inline std::string format_mixture(const Mixture& m) {
  std::string out;
  for (const auto& w : m) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", w.weight);
    out += (out.empty() ? "" : ",") + w.stream + "=" + value;
  }
  return out;
}

/// Parses "name=weight,name=weight,..."; throws naming the offending part when a name is not a
/// stream name or repeats, a weight is not a finite number in [0, 1], or the weights do not sum
/// to 1 (within 1e-6).
inline Mixture parse_mixture(std::string_view text) {
  Mixture m;
  check(!text.empty(), "mixture", "is empty: give name=weight pairs such as code=0.7,text=0.2,math=0.1");
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string part(text.substr(at, comma - at));
    const std::size_t eq = part.find('=');
    check(eq != std::string::npos, "mixture", "\"", part, "\" is not name=weight");
    StreamWeight w{part.substr(0, eq), 0};
    check(valid_stream_name(w.stream), "mixture", "stream name \"", w.stream,
          "\" must be 1-32 lowercase letters and digits");
    for (const auto& seen : m) check(seen.stream != w.stream, "mixture", "stream \"", w.stream, "\" is given twice");
    const std::string value = part.substr(eq + 1);
    char* end = nullptr;
    w.weight = value.empty() ? NAN : std::strtod(value.c_str(), &end);
    check(!value.empty() && end == value.c_str() + value.size() && std::isfinite(w.weight), "mixture", "weight \"",
          value, "\" of ", w.stream, " is not a number");
    check(w.weight >= 0 && w.weight <= 1, "mixture", "weight ", value, " of ", w.stream, " is outside [0, 1]");
    m.push_back(w);
    at = comma + 1;
  }
  double sum = 0;
  for (const auto& w : m) sum += w.weight;
  check(std::fabs(sum - 1.0) <= 1e-6, "mixture", "weights ", std::string(text), " sum to ", sum, ", not 1");
  return m;
}

/// The stream of a shard file named `<split>_[<stream>_]NNNNNN.bin` ("" for the unnamed stream).
inline std::string shard_stream(const std::filesystem::path& file, const std::string& split) {
  const std::string n = file.stem().string();  // train_code_000000
  const std::string rest = n.substr(std::min(n.size(), split.size() + 1));
  const std::size_t last = rest.rfind('_');
  return last == std::string::npos ? std::string() : rest.substr(0, last);
}

/// The `split` shards of `dir` grouped by stream name (list_shards order within each).
inline std::map<std::string, std::vector<std::filesystem::path>> list_streams(const std::filesystem::path& dir,
                                                                              const std::string& split) {
  std::map<std::string, std::vector<std::filesystem::path>> streams;
  for (auto& p : list_shards(dir, split + "_")) streams[shard_stream(p, split)].push_back(std::move(p));
  check(!(streams.count("") && streams.size() > 1), "data", dir.string(), " mixes unnamed ", split,
        "_NNNNNN.bin shards with named streams: write it again with megacpp-prepare");
  return streams;
}

/// A MixtureLoader's whole state.
struct MixturePosition {
  std::uint64_t rng_state = 0;                     ///< the row-drawing Rng
  std::map<std::string, LoaderPosition> streams;  ///< each named stream's next row
  /// Equal when the Rng and every stream's position are.
  friend bool operator==(const MixturePosition&, const MixturePosition&) = default;
};

/// Rows from several named streams by weight (see the file comment), or one unnamed stream.
class MixtureLoader {
 public:
  /// `streams` from list_streams(); `seed` seeds the row draws. One unnamed stream is read for
  /// rank `rank` of `world` (ShardLoader's slicing); named streams are mixed in one process only
  /// (world 1): the per-rank row draws would leave the ranks' stream positions apart, and a
  /// checkpoint holds one position.
  MixtureLoader(const std::map<std::string, std::vector<std::filesystem::path>>& streams, index_t batch, index_t seq,
                std::uint32_t vocab, std::uint64_t seed, int rank = 0, int world = 1)
      : batch_(batch), seq_(seq), vocab_(vocab), rng_(seed ^ 0xD1B54A32D192ED03ull) {
    check(!streams.empty(), "MixtureLoader", "no streams given");
    if (streams.count("")) {
      check(streams.size() == 1, "MixtureLoader", "the unnamed stream cannot be mixed with named ones");
      single_ = std::make_unique<ShardLoader>(streams.at(""), batch, seq, vocab, rank, world);
      return;
    }
    check(world == 1, "MixtureLoader", "the data has ", streams.size(),
          " named streams: mixtures train in one process, not data-parallel across ", world, " ranks (yet)");
    for (const auto& [name, shards] : streams) {
      check(valid_stream_name(name), "MixtureLoader", "stream name \"", name, "\" is not lowercase letters and digits");
      names_.push_back(name);
      loaders_.push_back(std::make_unique<ShardLoader>(shards, 1, seq, vocab));
      weights_.push_back(0);
    }
  }

  /// True when the data has named streams (weights apply); false for one unnamed stream.
  bool mixed() const { return !single_; }
  /// The named streams, sorted ("" alone for unnamed data).
  std::vector<std::string> streams() const { return mixed() ? names_ : std::vector<std::string>{""}; }

  /// Sets the weights; every stream `m` names must exist, streams it does not name get weight 0.
  void set_mixture(const Mixture& m) {
    check(mixed(), "MixtureLoader", "the data has one unnamed stream, so a mixture (", format_mixture(m),
          ") cannot apply: write named streams with megacpp-prepare --stream NAME=DIR");
    std::vector<double> w(names_.size(), 0.0);
    double sum = 0;
    for (const auto& sw : m) {
      std::size_t i = 0;
      while (i < names_.size() && names_[i] != sw.stream) ++i;
      check(i < names_.size(), "MixtureLoader", "unknown stream \"", sw.stream, "\": the data has ", joined());
      check(std::isfinite(sw.weight) && sw.weight >= 0, "MixtureLoader", "weight ", sw.weight, " of ", sw.stream,
            " is negative or not finite");
      w[i] = sw.weight;
      sum += sw.weight;
    }
    check(sum > 0, "MixtureLoader", "mixture ", format_mixture(m), " gives every stream weight 0");
    for (auto& x : w) x /= sum;
    weights_ = w;
  }
  /// The weights in force, one per stream of streams().
  const std::vector<double>& weights() const { return weights_; }

  /// Derive loss masks from FIM sentinels in every stream (ShardLoader::enable_fim_mask).
  void enable_fim_mask(const SpecialTokens& tokens) {
    if (single_) single_->enable_fim_mask(tokens);
    for (auto& l : loaders_) l->enable_fim_mask(tokens);
  }

  /// The rows of the next micro-batch, each from the stream its draw picked.
  template <class T, Backend B>
  PackedBatch<T, B> next() {
    if (single_) return single_->next<T, B>();
    check(weights_sum() > 0, "MixtureLoader", "no mixture set (set_mixture) for streams ", joined());
    PackedBatch<T, B> out, row;
    out.batch = batch_;
    out.seq = seq_;
    for (index_t b = 0; b < batch_; ++b) {
      loaders_[draw()]->next_host(row);
      out.input_ids_host.insert(out.input_ids_host.end(), row.input_ids_host.begin(), row.input_ids_host.end());
      out.target_ids_host.insert(out.target_ids_host.end(), row.target_ids_host.begin(), row.target_ids_host.end());
      out.loss_mask_host.insert(out.loss_mask_host.end(), row.loss_mask_host.begin(), row.loss_mask_host.end());
    }
    out.upload(static_cast<index_t>(vocab_));
    return out;
  }

  /// Index into streams() of the next row's stream (advances the draw Rng).
  std::size_t draw() {
    const double u = rng_.uniform();
    double cumulative = 0;
    std::size_t last = 0;
    for (std::size_t i = 0; i < weights_.size(); ++i) {
      if (weights_[i] <= 0) continue;
      last = i;
      cumulative += weights_[i];
      if (u < cumulative) return i;
    }
    return last;  // u within rounding of 1
  }

  /// The unnamed stream's position (single-stream data only).
  const LoaderPosition& single_position() const {
    check(!mixed(), "MixtureLoader", "single_position() of named streams");
    return single_->position();
  }
  /// Resumes the unnamed stream at `p`.
  void seek_single(const LoaderPosition& p) {
    check(!mixed(), "MixtureLoader", "the checkpoint holds one stream's position but the data has named streams ",
          joined());
    single_->seek(p);
  }
  /// The Rng and every named stream's position.
  MixturePosition position() const {
    MixturePosition p{rng_.state(), {}};
    for (std::size_t i = 0; i < names_.size(); ++i) p.streams[names_[i]] = loaders_[i]->position();
    return p;
  }
  /// Resumes at `p`; its streams must be exactly this data's streams.
  void seek(const MixturePosition& p) {
    check(mixed(), "MixtureLoader", "the checkpoint holds positions in named streams but the data has one unnamed stream");
    check(p.streams.size() == names_.size(), "MixtureLoader", "the checkpoint holds ", p.streams.size(),
          " streams, the data has ", joined());
    for (std::size_t i = 0; i < names_.size(); ++i) {
      const auto it = p.streams.find(names_[i]);
      check(it != p.streams.end(), "MixtureLoader", "the checkpoint has no position for stream \"", names_[i], "\"");
      loaders_[i]->seek(it->second);
    }
    rng_.set_state(p.rng_state);
  }

 private:
  double weights_sum() const {
    double s = 0;
    for (const double w : weights_) s += w;
    return s;
  }
  std::string joined() const {
    std::string s;
    for (const auto& n : names_) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "one unnamed stream" : "streams " + s;
  }

  index_t batch_, seq_;
  std::uint32_t vocab_;  // bounds every token id
  Rng rng_;
  std::unique_ptr<ShardLoader> single_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<ShardLoader>> loaders_;
  std::vector<double> weights_;
};

}  // namespace megacpp::data
