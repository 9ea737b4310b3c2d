// megacpp/nn/model/mtp.hpp: multi-token prediction of depth 1 (DeepSeek-V3, arXiv 2412.19437,
// section 2.2), the LM's optional second objective: predict token t+2 at every position t.
//
//   h_t   = RMSNorm(x_L)_t                        the trunk's final hidden state (LM::hidden)
//   e_t   = RMSNorm(E[x_{t+1}])                   embedding of the NEXT token (= targets_t)
//   u_t   = W_p [h_t ; e_t]                       W_p: (d, 2d), one Linear(2d -> d)     (eq. 21)
//   u     = block(u, documents)                   one transformer block, document-masked  (eq. 22)
//   loss  = CE(softcap(RMSNorm(u) E^T), x_{t+2})  the model's final norm and TIED head  (eq. 23)
//   total = main + lambda * loss                  (eq. 25, D = 1; lambda scheduled, docs/mtp.md)
// DeepSeek-V3 normalises h with its own RMSNorm; the trunk's final norm here has no gain, so
// RMSNorm(h) would equal h (up to eps) and h is used as it is. The block is what a pattern letter
// of the model builds (MtpDepth1<'A'>: the 'A' attention block with its MLP), every parameter of
// the module has Role::mtp (AdamW only: Muon refuses it, optim/hybrid.hpp), and generation never
// runs it.
//
// Targets, rolled by 2 and masked at document ends: position t learns x_{t+2} = targets_{t+1}
// only when x_{t+1} and x_{t+2} lie in t's document and in the row; otherwise its target is
// masked (weight 0), so no position learns a token of another document, and no position whose
// e_t embeds another document's token is learned. Such a position is the last of its document,
// so no other position attends to it: it contributes exactly zero gradient. Positions T-2 and
// T-1 of a row are always masked (x_T's document is unknown from the row, x_{T+1} is absent).
// The main loss mask of x_{t+2} (loss_mask_{t+1}, e.g. a FIM sentinel) applies as well.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/autograd/ops/embedding.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/loss_mask.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/linear_cross_entropy.hpp"
#include "megacpp/nn/model/pattern.hpp"

namespace megacpp {

/// Throws megacpp::Error naming `lambda` unless it is a valid MTP loss weight (finite, >= 0).
inline void check_mtp_weight(const char* op, double lambda) {
  check(std::isfinite(lambda) && lambda >= 0, op, "MTP loss weight lambda must be finite and >= 0 (0 skips the MTP "
        "computation), got ", lambda);
}

/// The rolled-by-2 targets of MTP depth 1 and their mask (see the file comment), on the host.
struct MtpTargets {
  std::vector<std::int32_t> targets;  ///< (batch, seq): x_{t+2} = targets_{t+1}; 0 where masked
  std::vector<float> mask;            ///< (batch, seq): 1 = learn, 0 = masked
  index_t learned = 0;                ///< positions with mask 1
};

/// Builds MtpTargets from the next-token targets (batch, seq), the main loss mask (empty: all 1)
/// and the batch's documents.
template <Backend B>
MtpTargets mtp_targets(const std::vector<std::int32_t>& targets, const std::vector<float>& loss_mask,
                       const DocumentLayout<B>& docs) {
  const index_t batch = docs.batch, seq = docs.seq;
  check(static_cast<index_t>(targets.size()) == batch * seq, "mtp_targets", "targets hold ", targets.size(),
        " ids, documents are (", batch, ", ", seq, ")");
  check(loss_mask.empty() || loss_mask.size() == targets.size(), "mtp_targets", "loss_mask holds ", loss_mask.size(),
        " values, targets ", targets.size());
  MtpTargets out{std::vector<std::int32_t>(targets.size(), 0), std::vector<float>(targets.size(), 0.0f), 0};
  for (index_t b = 0; b < batch; ++b) {
    const std::int32_t* doc = docs.doc_ids_host.data() + b * seq;
    for (index_t t = 0; t + 2 < seq; ++t) {
      const std::size_t i = static_cast<std::size_t>(b * seq + t);
      out.targets[i] = targets[i + 1];
      const bool same_document = doc[t] >= 0 && doc[t + 1] == doc[t] && doc[t + 2] == doc[t];
      const float m = same_document ? (loss_mask.empty() ? 1.0f : (loss_mask[i + 1] != 0 ? 1.0f : 0.0f)) : 0.0f;
      out.mask[i] = m;
      out.learned += m != 0;
    }
  }
  return out;
}

/// The MTP module of depth 1: W_p (Linear(2d -> d)) and one block of type BlockT.
template <class T, Backend B, Dims D, class BlockT>
struct MultiTokenPrediction {
  using V = Var<T, B>;  ///< activation type

  Linear<T, B> proj;  ///< W_p (d, 2d) over [h ; e], Role::mtp
  BlockT block;       ///< the transformer block (document-masked), every parameter Role::mtp

  MultiTokenPrediction() = default;
  /// W_p ~ N(0, 1/(2d)) then the block (built by `make_block`, e.g. a letter factory's make), all
  /// drawn from rng; every parameter is then given Role::mtp.
  template <class MakeBlock>
  MultiTokenPrediction(Rng& rng, MakeBlock&& make_block)
      : proj(2 * D.d_model, D.d_model, rng, LinearInit::normal, false, Role::mtp), block(make_block(rng)) {
    block.for_each_param([](const std::string&, Param<T, B>& p) { p.role = Role::mtp; });
  }

  /// lambda, the weight of the MTP loss in the total (0: the LM skips the module entirely).
  double weight() const { return weight_; }
  /// Sets lambda; throws megacpp::Error with the value unless it is finite and >= 0.
  void set_weight(double lambda) {
    check_mtp_weight("MultiTokenPrediction::set_weight", lambda);
    weight_ = lambda;
  }

  /// The mean MTP loss over the learned positions of MtpTargets (a constant 0 when none is): h
  /// (batch, seq, d) the trunk's final hidden state, `embedding` the tied (vocab, d) table.
  /// Targets bounded by the vocabulary (core/bounded_ids.hpp): the embedding of x_{t+1} makes no
  /// pass over them. The targets and the mask are rolled on the host: from the host copies that
  /// BoundedIds and LossMask made by `from_host` keep (nothing read back), else read back once.
  /// The rolled ones are checked and summed on the host before their upload (on a GPU, a copy that
  /// waits only above 4 MiB, a million tokens, or when the pinned staging's cap is full).
  V loss(const V& h, const V& embedding, const BoundedIds<B>& targets, const LossMask<T, B>& loss_mask,
         const DocumentLayout<B>& docs, double norm_eps, const LinearCrossEntropyOptions& head) const {
    const char* op = "MultiTokenPrediction::loss";
    check_targets_shape(op, targets.ids().shape(), docs);
    const index_t vocab = embedding.shape()[0];
    targets.check_for(op, vocab, "target");  // so the host copy still describes them
    std::vector<std::int32_t> targets_read;
    const std::vector<std::int32_t>& targets_host =
        targets.host() ? *targets.host() : (targets_read = targets.ids().to_host());
    std::vector<float> mask_host;
    if (loss_mask.defined()) {
      loss_mask.check_unwritten(op);
      std::vector<T> mask_read;
      const std::vector<T>& weights =
          loss_mask.host() ? *loss_mask.host() : (mask_read = loss_mask.weights().to_host());
      for (const T m : weights) mask_host.push_back(m != T(0) ? 1.0f : 0.0f);
    }
    MtpTargets rolled = mtp_targets(targets_host, mask_host, docs);
    if (rolled.learned == 0) return V(Tensor<T, B>::zeros(Shape{}));
    const Shape bt{docs.batch, docs.seq};
    const V e = rmsnorm(megacpp::embedding(embedding, targets), norm_eps);  // e_t = RMSNorm(E[x_{t+1}]): (B, T, d)
    const V u = block.forward(proj.forward(concat<T, B>({h, e}, -1)), docs);  // (B, T, d)
    const auto rolled_targets = BoundedIds<B>::from_host(op, bt, std::move(rolled.targets), vocab, "target");
    const auto rolled_mask = LossMask<T, B>::from_host(op, bt, std::vector<T>(rolled.mask.begin(), rolled.mask.end()));
    return linear_cross_entropy(rmsnorm(u, norm_eps), embedding, rolled_targets, rolled_mask, head);
  }

  /// The same with targets and mask from backend memory: the targets checked against the
  /// vocabulary by one pass, both read back once, the mask's weights checked as
  /// LossMask::from_host does (finite, >= 0) and uploaded again.
  V loss(const V& h, const V& embedding, const Tensor<std::int32_t, B>& targets, const Tensor<T, B>& loss_mask,
         const DocumentLayout<B>& docs, double norm_eps, const LinearCrossEntropyOptions& head) const {
    const char* op = "MultiTokenPrediction::loss";
    check_targets_shape(op, targets.shape(), docs);
    const auto bounded = BoundedIds<B>::checked(op, targets, embedding.shape()[0], "target");
    const auto mask = loss_mask.defined() ? LossMask<T, B>::from_host(op, loss_mask.shape(), loss_mask.to_host())
                                          : LossMask<T, B>();
    return loss(h, embedding, bounded, mask, docs, norm_eps, head);
  }

  /// Visits "proj.weight" and "block.<...>" under `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    proj.for_each_param(visit, child_name(prefix, "proj"));
    block.for_each_param(visit, child_name(prefix, "block"));
  }

  /// Visits the block's non-trainable state (autograd/module.hpp), if any.
  template <class Visitor>
  void for_each_state(Visitor&& visit, const std::string& prefix = "") {
    visit_state(block, visit, child_name(prefix, "block"));
  }

 private:
  static void check_targets_shape(const char* op, const Shape& targets, const DocumentLayout<B>& docs) {
    check(targets.rank() == 2 && targets[0] == docs.batch && targets[1] == docs.seq, op, "targets ", targets,
          " do not match the documents' (", docs.batch, ", ", docs.seq, ")");
  }

  double weight_ = 0.3;  // DeepSeek-V3's first lambda (section 4.2: 0.3, then 0.1)
};

/// The LM's MTP policy for a model without MTP: no parameters, no loss, nothing computed.
struct NoMtp {
  static constexpr bool enabled = false;  ///< no module
  /// The (empty) module type.
  template <class T, Backend B, Dims D, class LettersT>
  struct module {};
};

/// The LM's MTP policy "depth 1, the block that pattern letter `L` builds" (MtpDepth1<'A'>: the
/// attention block of the model's 'A' letter, with its MLP).
template <char L = 'A'>
struct MtpDepth1 {
  static constexpr bool enabled = true;  ///< the LM holds a module
  static constexpr char letter = L;      ///< the letter whose block the module uses
  /// The block recipe of letter L in the model's letter table.
  template <class T, Backend B, Dims D, class LettersT>
  using factory = typename detail::letter_entry<L, LettersT>::type::template factory<T, B, D>;
  /// The module type.
  template <class T, Backend B, Dims D, class LettersT>
  using module = MultiTokenPrediction<T, B, D, typename factory<T, B, D, LettersT>::type>;
};

}  // namespace megacpp
