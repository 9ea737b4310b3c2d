// examples/train/evaluate.hpp: megacpp-train's validation pass, over every rank of a
// data-parallel run (each rank evaluates its own rows; the sums are all-reduced).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "megacpp/data.hpp"
#include "megacpp/dist/comm.hpp"
#include "options.hpp"

namespace megacpp::examples {

namespace fs = std::filesystem;

/// Validation loss (nats per token) and bits per byte (byte-tokenizer shards only; 0 otherwise).
struct EvalResult {
  double loss = 0, bits_per_byte = 0;
};

/// Sets the MTP weight lambda of `model` for as long as it lives, then restores it (nothing for
/// a model without MTP).
template <class Model>
class ScopedMtpWeight {
 public:
  ScopedMtpWeight(Model& model, double lambda) : model_(model) {
    if constexpr (Model::has_mtp) {
      saved_ = model.mtp.weight();
      model.mtp.set_weight(lambda);
    }
  }
  ~ScopedMtpWeight() {
    if constexpr (Model::has_mtp) model_.mtp.set_weight(saved_);
  }
  ScopedMtpWeight(const ScopedMtpWeight&) = delete;
  ScopedMtpWeight& operator=(const ScopedMtpWeight&) = delete;

 private:
  Model& model_;
  double saved_ = 0;
};

/// The validation pass over `comm`'s ranks: each evaluates its own rows of the same batches and
/// the sums (nats, tokens, bytes) are added over ranks, so every rank returns the same result.
template <class Model, class Comm>
EvalResult evaluate(Model& model, const std::vector<fs::path>& shards, const RunPlan& p,
                    const data::ShardMetadata& meta, Comm& comm) {
  NoGrad no_grad;
  const ScopedMtpWeight<Model> next_token_only(model, 0.0);  // validation is the next-token loss alone
  const int world = comm.size();
  data::ShardLoader val(shards, p.micro_batch, p.seq_len, static_cast<std::uint32_t>(meta.vocab_size), comm.rank(),
                        world);
  const index_t per_batch = p.micro_batch * p.seq_len;
  index_t available = 0;  // evaluate each validation token at most once
  for (const auto& s : shards) available += data::TokenShard(s).size() / per_batch * per_batch;
  const index_t batches = std::max<index_t>(1, std::min<index_t>(p.val_tokens, available) / (per_batch * world));
  const bool bytes_are_tokens = meta.tokenizer == "byte";
  double nats = 0, tokens = 0, bytes = 0;
  for (index_t i = 0; i < batches; ++i) {
    const auto b = val.next<float, typename Model::backend_type>();
    const auto docs = Model::documents(b.input_ids_host, p.micro_batch, p.seq_len, meta.special.bos);
    nats += static_cast<double>(model.loss(b.input_ids, b.target_ids, b.loss_mask, docs).item()) * per_batch;
    tokens += per_batch;
    if (bytes_are_tokens)
      for (const std::int32_t t : b.target_ids_host) bytes += t < 256;
  }
  double sums[3] = {nats, tokens, bytes};
  comm.template all_reduce<double, Cpu>(sums, 3, dist::ReduceOp::sum);
  nats = sums[0], tokens = sums[1], bytes = sums[2];
  return {nats / tokens, bytes > 0 ? nats / std::log(2.0) / bytes : 0.0};
}

}  // namespace megacpp::examples
