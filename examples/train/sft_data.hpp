// examples/train/sft_data.hpp: megacpp-train's supervised fine-tuning data (--sft).
//
//   --sft FILE            JSON Lines of examples (data/sft.hpp: prompt/response, or an edit as
//                         instruction/before/after|diff); the prompt's tokens are masked out of the loss
//   --sft_val FILE        held-out examples for the validation loss; without it every 20th example
//                         of --sft is held out (a file of fewer than 20 is validated on itself, as
//                         the start-up line says)
//   --sft_fim_share S     share of rows drawn from --data's pretraining shards (their FIM
//                         documents, data/fim.hpp) so fill-in-the-middle is not forgotten; the
//                         rest are packed SFT examples (default 0.05)
//
// The examples are tokenized with the checkpoint's tokenizer (the byte tokenizer, or the BPE
// tokenizer.json given with --tokenizer). Every global row is drawn in order on every rank
// (whether it is an SFT row or a pretraining row is a draw from an Rng seeded by the run's seed)
// and rank r keeps rows [r * micro_batch, (r + 1) * micro_batch) of each micro-step, so world W x
// micro-batch b reads the rows of world 1 x accumulation W x micro-batch b. The position (the
// packer's, the pretraining loader's, the row Rng) is saved in state.json's "post_training" with
// the SFT file's fingerprint, so a resumed run reads the exact rows and refuses another file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/data.hpp"
#include "megacpp/data/sft.hpp"
#include "megacpp/dist/comm.hpp"
#include "megacpp/io/mapped_file.hpp"
#include "options.hpp"

namespace megacpp::examples {

/// The SFT rows of one run, and its validation loss.
class SftData {
 public:
  /// Reads and tokenizes the examples (every problem an error naming the flag, file and line).
  SftData(const std::string& tool, const SftFlags& flags, const SampleCodec& codec, const data::ShardMetadata& meta,
          const std::vector<std::filesystem::path>& train_shards, index_t micro_batch, index_t seq, std::uint64_t seed,
          int rank, int world, bool fim_mask)
      : micro_batch_(micro_batch), seq_(seq), vocab_(static_cast<index_t>(meta.vocab_size)), rank_(rank), world_(world),
        pad_(meta.special.eos),
        fim_share_(flags.fim_share), row_rng_(seed ^ 0x5F7A11C3ull) {
    check_flag(codec.available(), tool, "sft", flags.file,
               ": the shards' BPE tokenizer needs its tokenizer.json (--tokenizer) to encode the examples");
    const auto encode = [&](const std::string& text) {
      auto ids = codec.prompt(text);  // BOS + tokens
      ids.erase(ids.begin());
      return ids;
    };
    const auto records = read_examples(tool, "sft", flags.file);
    fingerprint_ = file_fingerprint(flags.file);
    std::vector<data::SftExample> train, val;
    for (std::size_t i = 0; i < records.size(); ++i) {
      auto example = data::make_sft_example(records[i], encode, meta.special);
      (flags.val_file.empty() && records.size() >= 20 && i % 20 == 19 ? val : train).push_back(std::move(example));
    }
    if (!flags.val_file.empty())
      for (const auto& r : read_examples(tool, "sft_val", flags.val_file))
        val.push_back(data::make_sft_example(r, encode, meta.special));
    validated_on_train_ = val.empty();
    if (validated_on_train_) val = train;
    train_examples_ = train.size();
    val_examples_ = val.size();
    try {
      train_.emplace(std::move(train), seq, seed);
      val_.emplace(std::move(val), seq, seed, /*shuffle=*/false);
    } catch (const Error& e) {
      throw UsageError(tool, std::string("--sft ") + flags.file + ": " + e.what() + " (raise --seq_len or shorten it)");
    }
    if (fim_share_ > 0) {
      pretraining_.emplace(train_shards, 1, seq, static_cast<std::uint32_t>(meta.vocab_size), 0, 1);
      if (fim_mask) pretraining_->enable_fim_mask(meta.special);
    }
  }

  /// One line for the start of the run.
  std::string describe() const {
    char line[400];
    std::snprintf(line, sizeof line,
                  "SFT: %zu training examples (%zu longer than a row of %lld tokens, cut), validation on %zu %s; "
                  "%.0f%% of rows from the pretraining shards (FIM kept in)",
                  train_examples_, train_->truncated(), static_cast<long long>(seq_), val_examples_,
                  validated_on_train_ ? "training examples (fewer than 20 and no --sft_val)" : "held-out examples",
                  100 * fim_share_);
    return line;
  }

  /// This rank's rows of the next micro-batch.
  template <class T, class B>
  data::PackedBatch<T, B> next() {
    data::PackedBatch<T, B> out;
    out.batch = micro_batch_;
    out.seq = seq_;
    const auto n = static_cast<std::size_t>(micro_batch_ * seq_);
    out.input_ids_host.resize(n);
    out.target_ids_host.resize(n);
    out.loss_mask_host.resize(n);
    std::vector<std::int32_t> input(static_cast<std::size_t>(seq_)), target(input.size());
    std::vector<T> mask(input.size());
    for (int r = 0; r < world_; ++r)
      for (index_t row = 0; row < micro_batch_; ++row) {
        next_row(input.data(), target.data(), mask.data());
        if (r != rank_) continue;
        const auto at = static_cast<std::ptrdiff_t>(row * seq_);
        std::copy(input.begin(), input.end(), out.input_ids_host.begin() + at);
        std::copy(target.begin(), target.end(), out.target_ids_host.begin() + at);
        std::copy(mask.begin(), mask.end(), out.loss_mask_host.begin() + at);
      }
    out.upload(vocab_);
    return out;
  }

  /// The position, for state.json's "post_training".
  nlohmann::json position() const {
    nlohmann::json j = {{"stage", "sft"},
                        {"sft_fingerprint", fingerprint_},
                        {"epoch", train_->position().epoch},
                        {"next", train_->position().next},
                        {"row_rng_state", std::to_string(row_rng_.state())}};
    if (pretraining_) {
      const auto& p = pretraining_->position();
      j["pretraining"] = {{"shard", p.shard}, {"token", p.token}, {"epoch", p.epoch}};
    }
    return j;
  }

  /// Continues from `saved` (a position() of the checkpoint `where`); throws when it is not an SFT
  /// checkpoint of the same file and --sft_fim_share.
  void seek(const nlohmann::json& saved, const std::string& where) {
    check(saved.is_object() && saved.value("stage", std::string()) == "sft", "megacpp-train", "checkpoint ", where,
          " is not an SFT run: start SFT from it with --init instead of --resume");
    check(saved.value("sft_fingerprint", std::string()) == fingerprint_, "megacpp-train", "checkpoint ", where,
          " was trained on another --sft file (fingerprint ", saved.value("sft_fingerprint", std::string()), ", this one ",
          fingerprint_, "): resume on the same file");
    check(saved.contains("pretraining") == pretraining_.has_value(), "megacpp-train", "checkpoint ", where,
          " was trained with ", pretraining_ ? "--sft_fim_share 0" : "a --sft_fim_share above 0",
          ": resume with the same share");
    try {
      train_->seek({saved.at("epoch").get<std::uint64_t>(), saved.at("next").get<std::size_t>()});
      row_rng_.set_state(std::stoull(saved.at("row_rng_state").get<std::string>()));
      if (pretraining_) {
        const auto& p = saved.at("pretraining");
        pretraining_->seek({p.at("shard").get<std::size_t>(), p.at("token").get<index_t>(), p.at("epoch").get<std::uint64_t>()});
      }
    } catch (const nlohmann::json::exception& e) {
      fail("megacpp-train", "checkpoint ", where, ": malformed \"post_training\" (", e.what(), ")");
    } catch (const std::logic_error&) {
      fail("megacpp-train", "checkpoint ", where, ": \"row_rng_state\" is not an unsigned integer");
    }
  }

  /// Mean loss (nats per learned token) and bits per byte (byte tokenizer; 0 otherwise) of the
  /// validation examples, each once, over every rank of `comm`.
  template <class Model, class Comm>
  std::pair<double, double> evaluate(Model& model, Comm& comm, std::int32_t bos, bool bytes_are_tokens) const {
    NoGrad no_grad;
    data::SftPacker val = *val_;
    std::vector<std::int32_t> input(static_cast<std::size_t>(seq_)), target(input.size());
    std::vector<float> mask(input.size());
    double nats = 0, tokens = 0, bytes = 0;
    while (val.position().epoch == 0) {
      data::PackedBatch<float, typename Model::backend_type> b;
      b.batch = micro_batch_;
      b.seq = seq_;
      for (int r = 0; r < world_; ++r)
        for (index_t row = 0; row < micro_batch_; ++row) {
          if (val.position().epoch == 0) {
            val.next_row(input.data(), target.data(), mask.data(), pad_);
          } else {  // past the last example: a padding row with nothing learned
            std::fill(input.begin(), input.end(), pad_);
            std::fill(target.begin(), target.end(), pad_);
            std::fill(mask.begin(), mask.end(), 0.0f);
          }
          if (r != rank_) continue;
          b.input_ids_host.insert(b.input_ids_host.end(), input.begin(), input.end());
          b.target_ids_host.insert(b.target_ids_host.end(), target.begin(), target.end());
          b.loss_mask_host.insert(b.loss_mask_host.end(), mask.begin(), mask.end());
        }
      double count = 0;
      for (std::size_t i = 0; i < b.loss_mask_host.size(); ++i)
        if (b.loss_mask_host[i] != 0) {
          ++count;
          if (bytes_are_tokens && b.target_ids_host[i] < 256) ++bytes;
        }
      if (count == 0) continue;
      b.upload(vocab_);
      const auto docs = Model::documents(b.input_ids_host, micro_batch_, seq_, bos);
      nats += static_cast<double>(model.loss(b.input_ids, b.target_ids, b.loss_mask, docs).item()) * count;
      tokens += count;
    }
    double sums[3] = {nats, tokens, bytes};
    comm.template all_reduce<double, Cpu>(sums, 3, dist::ReduceOp::sum);
    return {sums[1] > 0 ? sums[0] / sums[1] : 0.0, sums[2] > 0 ? sums[0] / std::log(2.0) / sums[2] : 0.0};
  }

 private:
  static std::vector<data::SftRecord> read_examples(const std::string& tool, const char* flag, const std::string& file) {
    check_flag(std::filesystem::is_regular_file(file), tool, flag, file, " is not a file");
    try {
      return data::read_sft_file(file);
    } catch (const Error& e) {
      throw UsageError(tool, std::string("--") + flag + ": " + e.what());
    }
  }
  // FNV-1a over the file's bytes, as 16 hex digits: enough to tell another file on resume.
  static std::string file_fingerprint(const std::string& file) {
    const io::MappedFile mapped(file, "SFT");
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const char c : mapped.bytes()) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return hex;
  }
  // The next global row: pretraining (with probability fim_share) or packed SFT examples.
  template <class T>
  void next_row(std::int32_t* input, std::int32_t* target, T* mask) {
    if (pretraining_ && row_rng_.uniform() < fim_share_) {
      data::PackedBatch<T, Cpu> row;
      pretraining_->next_host(row);
      std::copy(row.input_ids_host.begin(), row.input_ids_host.end(), input);
      std::copy(row.target_ids_host.begin(), row.target_ids_host.end(), target);
      std::copy(row.loss_mask_host.begin(), row.loss_mask_host.end(), mask);
      return;
    }
    train_->next_row(input, target, mask, pad_);
  }

  index_t micro_batch_, seq_;
  index_t vocab_;  // bounds every token id
  int rank_, world_;
  std::int32_t pad_;
  double fim_share_;
  Rng row_rng_;
  std::string fingerprint_;
  bool validated_on_train_ = false;
  std::size_t train_examples_ = 0, val_examples_ = 0;
  std::optional<data::SftPacker> train_, val_;
  std::optional<data::ShardLoader> pretraining_;
};

}  // namespace megacpp::examples
