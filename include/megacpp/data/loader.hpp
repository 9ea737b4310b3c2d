// megacpp/data/loader.hpp: packed training rows from token shards, sliced by data-parallel rank.
//
// The shards form one token stream, read in order (modded-nanogpt's DistributedDataLoader):
// each step takes world * batch * seq + 1 consecutive tokens; rank r owns rows
// [r * batch, (r + 1) * batch), each row being seq + 1 tokens (inputs and the targets shifted by
// one). Documents are already separated by BOS in the stream, so rows are packed sequences and
// the model derives doc_ids from them. A step that does not fit in the rest of a shard starts at
// the next shard (after the last, the first again: a new epoch). The position is the loader's
// whole state, so a checkpoint can resume the exact token stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/loss_mask.hpp"
#include "megacpp/core/tensor.hpp"
#include "megacpp/data/fim.hpp"
#include "megacpp/data/shard.hpp"

namespace megacpp::data {

/// One rank's rows for one step: (batch, seq) ids on backend B and a per-token loss mask.
template <class T, Backend B>
struct PackedBatch {
  /// Rows in this rank's step.
  index_t batch = 0, seq = 0;  ///< tokens per row
  std::vector<std::int32_t> input_ids_host;   ///< (batch, seq), row-major: documents derive from these
  std::vector<std::int32_t> target_ids_host;  ///< (batch, seq)
  std::vector<T> loss_mask_host;              ///< (batch, seq): 1 = learn this target, 0 = do not
  BoundedIds<B> input_ids;   ///< (batch, seq) input_ids_host on backend B, below the vocabulary (set by upload())
  BoundedIds<B> target_ids;  ///< (batch, seq) target_ids_host on backend B, below the vocabulary (set by upload())
  LossMask<T, B> loss_mask;  ///< (batch, seq) loss_mask_host on backend B, with its sum (set by upload())

  /// Copies the host vectors to the backend (after a transform such as FIM edited them), checking
  /// every id against [0, vocab) and every mask weight (finite, >= 0) on the host first: a model
  /// given these makes no pass over them and, on a GPU, reads nothing back to check or count them.
  void upload(index_t vocab) {
    const char* op = "PackedBatch::upload";
    const Shape s{batch, seq};
    input_ids = BoundedIds<B>::from_host(op, s, input_ids_host, vocab, "token");
    target_ids = BoundedIds<B>::from_host(op, s, target_ids_host, vocab, "target");
    loss_mask = LossMask<T, B>::from_host(op, s, loss_mask_host);
  }
};

/// Where the loader is in the token stream.
struct LoaderPosition {
  std::size_t shard = 0;  ///< index into the shard list
  index_t token = 0;      ///< first token of the next step within that shard
  std::uint64_t epoch = 0;  ///< completed passes over the shard list
  /// Equal when shard, token and epoch are all equal.
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

/// Every `*.bin` file in `dir`, sorted by name; an error when there is none.
inline std::vector<std::filesystem::path> list_shards(const std::filesystem::path& dir, const std::string& prefix = "") {
  check(std::filesystem::is_directory(dir), "data", "data directory ", dir.string(), " does not exist");
  std::vector<std::filesystem::path> shards;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && e.path().extension() == ".bin" && name.rfind(prefix, 0) == 0) shards.push_back(e.path());
  }
  std::sort(shards.begin(), shards.end());
  check(!shards.empty(), "data", "no ", prefix.empty() ? "" : prefix + "*", ".bin shards in ", dir.string());
  return shards;
}

/// Yields each step's packed rows for one rank of `world`.
class ShardLoader {
 public:
  /// Opens (and validates) every shard; `vocab` bounds every token id read.
  ShardLoader(std::vector<std::filesystem::path> shards, index_t batch, index_t seq, std::uint32_t vocab,
              int rank = 0, int world = 1)
      : batch_(batch), seq_(seq), vocab_(vocab), rank_(rank) {
    check(!shards.empty(), "ShardLoader", "no shards given");
    check(batch > 0 && seq > 0, "ShardLoader", "batch and seq must be positive, got ", batch, " x ", seq);
    check(world > 0 && rank >= 0 && rank < world, "ShardLoader", "rank ", rank, " outside world of ", world);
    // world x batch x seq + 1 in checked arithmetic: hostile flags must not wrap to a small step.
    const bool overflow = __builtin_mul_overflow(static_cast<index_t>(world), batch, &tokens_per_step_) ||
                          __builtin_mul_overflow(tokens_per_step_, seq, &tokens_per_step_) ||
                          __builtin_add_overflow(tokens_per_step_, index_t{1}, &tokens_per_step_);
    check(!overflow, "ShardLoader", "a step of world ", world, " x batch ", batch, " x seq ", seq,
          " + 1 tokens overflows a 64-bit token count");
    const index_t need = tokens_per_step();
    for (auto& p : shards) {
      shards_.push_back(std::make_unique<TokenShard>(p));
      check(shards_.back()->size() >= need, "ShardLoader", p.string(), " holds ", shards_.back()->size(),
            " tokens, fewer than one step needs (", need, " = world ", world, " x batch ", batch, " x seq ", seq, " + 1)");
    }
  }

  /// Tokens one step consumes across all ranks (+1 for the last target).
  index_t tokens_per_step() const { return tokens_per_step_; }
  /// Where the next step starts (save it in a checkpoint; restore it with seek()).
  const LoaderPosition& position() const { return position_; }
  /// Resumes at `p` (from a checkpoint); validates it against the shard list.
  void seek(const LoaderPosition& p) {
    check(p.shard < shards_.size(), "ShardLoader", "resume shard index ", p.shard, " >= ", shards_.size(), " shards");
    // Every shard holds at least one step (constructor), so the subtraction cannot go negative.
    check(p.token >= 0 && p.token <= shards_[p.shard]->size() - tokens_per_step(), "ShardLoader", "resume position ",
          p.token, " does not leave a step of ", tokens_per_step(), " tokens in shard ", shards_[p.shard]->path().string(),
          " (", shards_[p.shard]->size(), " tokens)");
    position_ = p;
  }

  /// Derive loss_mask from FIM sentinels (data/fim.hpp): a target that is `<PRE>`, `<SUF>` or `<MID>` gets 0.
  void enable_fim_mask(const SpecialTokens& tokens) {
    fim_ = tokens;
    fim_enabled_ = true;
  }

  /// This rank's rows for the next step; loss_mask is 1 except FIM sentinel targets (when enabled).
  template <class T, Backend B>
  PackedBatch<T, B> next() {
    PackedBatch<T, B> out;
    next_host(out);
    out.upload(static_cast<index_t>(vocab_));
    return out;
  }

  /// next() without the upload: fills out's host vectors (batch, seq, ids, loss mask) only.
  template <class T, Backend B>
  void next_host(PackedBatch<T, B>& out) {
    if (position_.token + tokens_per_step() > shards_[position_.shard]->size()) {
      position_.token = 0;
      if (++position_.shard == shards_.size()) {
        position_.shard = 0;
        ++position_.epoch;
      }
    }
    const TokenShard& shard = *shards_[position_.shard];
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch_ * seq_ + 1));
    shard.read(position_.token + static_cast<index_t>(rank_) * batch_ * seq_, tokens, vocab_);
    position_.token += tokens_per_step() - 1;

    out.batch = batch_;
    out.seq = seq_;
    out.input_ids_host.resize(static_cast<std::size_t>(batch_ * seq_));
    out.target_ids_host.resize(static_cast<std::size_t>(batch_ * seq_));
    for (index_t b = 0; b < batch_; ++b)
      for (index_t t = 0; t < seq_; ++t) {
        out.input_ids_host[b * seq_ + t] = tokens[b * seq_ + t];
        out.target_ids_host[b * seq_ + t] = tokens[b * seq_ + t + 1];
      }
    out.loss_mask_host.assign(out.input_ids_host.size(), T(1));
    if (fim_enabled_) fim_loss_mask(out.target_ids_host.data(), out.target_ids_host.size(), fim_, out.loss_mask_host.data());
  }

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  index_t batch_, seq_;
  index_t tokens_per_step_ = 0;  // world x batch x seq + 1, checked in the constructor
  std::uint32_t vocab_;
  int rank_;  // the world size only enters tokens_per_step_
  LoaderPosition position_;
  SpecialTokens fim_;
  bool fim_enabled_ = false;
};

}  // namespace megacpp::data
