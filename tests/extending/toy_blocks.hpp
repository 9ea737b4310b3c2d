// tests/extending/toy_blocks.hpp: the toy mixer, the toy feed-forward and their pattern letter
// that docs/extending.md walks through. They live with the tests so that every line the page
// quotes is compiled and tested (tests/extending/test_extending.cpp); they are not library code.
//
//   ToyEma (mixer)         u = x W_in^T                                   (batch, seq, width)
//                          h_t = a (.) h_{t-1} + (1 - a) (.) u_t,  h = 0 before every document start
//                          a = sigmoid(decay_logit), one learned decay per channel
//                          y = h W_out^T, W_out zero-initialised          (batch, seq, d_model)
//     A damped exponential moving average as a sequence mixer is MEGA's (Ma et al., "Mega: Moving
//     Average Equipped Gated Attention", arXiv 2209.10655, eq. 2); this is its undamped,
//     one-dimensional form, restarted at every document (docs/systems/masking.md).
//   ToyGatedMlp (FFN)      y = W_down (silu(W_gate x) (.) W_up x)          SwiGLU (Shazeer, "GLU
//                          Variants Improve Transformer", arXiv 2002.05202, eq. 6 without biases)
//                          aux = mean(hidden^2), weight aux_weight          activation regularisation
//                          (Merity et al., "Revisiting Activation Regularization for Language
//                          RNNs", arXiv 1708.01009, eq. 1, applied to the MLP's hidden units)
//   ToyLetter<ToySizes{}>  Block<ToyEma, ToyGatedMlp> for Letters<Letter<'T', ToyLetter<...>>>
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/nn/aux_loss.hpp"
#include "megacpp/nn/block.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/model/pattern.hpp"

namespace megacpp::toy {

// --- the op: one graph node with a hand-written backward ---------------------------------------

/// a = sigmoid(logit): the decay stays in (0, 1), a contraction, whatever the optimiser does.
template <class T>
T ema_decay(T logit) { return T(1) / (T(1) + std::exp(-logit)); }

/// One step of the recurrence, h_t = a h_{t-1} + (1 - a) u_t: written once, for the training op
/// and for the decode step, so the two agree bit for bit.
template <class T>
T ema_update(T a, T h_prev, T u) { return a * h_prev + (T(1) - a) * u; }

/// u (batch, seq, channels), decay_logit (channels) -> h (batch, seq, channels): the EMA of the
/// file comment, h = 0 before the first token of every document of `docs`. Host loops over the
/// tensors' memory: fine for a toy on a host backend (Cpu); a real layer puts these loops behind a
/// kernel contract each backend implements (docs/extending.md, "Reaching a fused kernel").
template <class T, Backend B>
Var<T, B> document_ema(const Var<T, B>& u, const Var<T, B>& decay_logit, const DocumentLayout<B>& docs) {
  static_assert(B::host_accessible,
                "megacpp_toy_ema_needs_host_memory: document_ema runs host loops over data(); on a device backend "
                "write it as a kernel contract (see docs/extending.md)");
  const char* op = "document_ema";
  check(u.rank() == 3, op, "u must be (batch, seq, channels), got ", u.shape());
  const index_t batch = u.shape()[0], seq = u.shape()[1], C = u.shape()[2];
  check(decay_logit.shape() == Shape{C}, op, "decay_logit ", decay_logit.shape(), " must be (", C, ") for u ", u.shape());
  docs.check_matches(op, batch, seq);

  std::vector<T> a(static_cast<std::size_t>(C));
  for (index_t c = 0; c < C; ++c) a[c] = ema_decay(decay_logit.value().data()[c]);
  Tensor<T, B> h(u.shape());
  const T* x = u.value().data();
  for (index_t b = 0; b < batch; ++b) {
    const std::int32_t* row_doc_ids = docs.doc_ids_host.data() + b * seq;
    for (index_t t = 0; t < seq; ++t) {
      const bool start = kernels::starts_document(row_doc_ids, t);  // the library's one rule
      for (index_t c = 0; c < C; ++c) {
        const index_t i = (b * seq + t) * C + c;
        h.data()[i] = ema_update(a[c], start ? T(0) : h.data()[i - C], x[i]);
      }
    }
  }

  // Backpropagation through time, right to left (dh_t: the gradient reaching h_t from the loss
  // and from h_{t+1}):
  //   dh_t     = g_t + a (.) dh_{t+1}         (only while token t + 1 continues t's document)
  //   du_t     = (1 - a) (.) dh_t
  //   da       = sum_t dh_t (.) (h_{t-1} - u_t),   h_{t-1} = 0 at a document start
  //   dlogit   = da (.) a (1 - a)               (the sigmoid's derivative)
  auto backward = [u, decay_logit, docs, h, a, C](const Tensor<T, B>& g) {
    const index_t batch = u.shape()[0], seq = u.shape()[1];
    const T* x = u.value().data();
    T* du = u.requires_grad() ? u.grad_buffer().data() : nullptr;
    std::vector<double> da(static_cast<std::size_t>(C), 0.0);  // one fixed summation order per channel
    std::vector<T> carry(static_cast<std::size_t>(C));          // a (.) dh_{t+1}, per channel
    for (index_t b = 0; b < batch; ++b) {
      const std::int32_t* row_doc_ids = docs.doc_ids_host.data() + b * seq;
      std::fill(carry.begin(), carry.end(), T(0));
      for (index_t t = seq - 1; t >= 0; --t) {
        const bool start = kernels::starts_document(row_doc_ids, t);
        for (index_t c = 0; c < C; ++c) {
          const index_t i = (b * seq + t) * C + c;
          const T dh = g.data()[i] + carry[c];
          if (du) du[i] += (T(1) - a[c]) * dh;
          da[c] += static_cast<double>(dh) * static_cast<double>((start ? T(0) : h.data()[i - C]) - x[i]);
          carry[c] = start ? T(0) : a[c] * dh;  // nothing flows into the previous document
        }
      }
    }
    if (decay_logit.requires_grad()) {
      T* dlogit = decay_logit.grad_buffer().data();
      for (index_t c = 0; c < C; ++c) dlogit[c] += static_cast<T>(da[c]) * a[c] * (T(1) - a[c]);
    }
  };
  return make_result("document_ema", h, std::move(backward), u, decay_logit);
}

// --- the mixer ----------------------------------------------------------------------------------

/// ToyEma's decode cache: the last h of each row's current document.
template <class T, Backend B>
struct ToyEmaCache {
  Tensor<T, B> h;  ///< (batch, width)
  /// Rows the cache holds (LM::step_logits checks it against the tokens given).
  index_t batch() const { return h.defined() ? h.shape()[0] : 0; }
};

/// A document-causal EMA mixer (file comment); satisfies Block's Mixer concept.
template <class T, Backend B>
struct ToyEma {
  using value_type = T;    ///< element type
  using backend_type = B;  ///< backend
  using V = Var<T, B>;     ///< the activation type

  Linear<T, B> w_in;        ///< (width, d_model): u = x W_in^T
  Param<T, B> decay_logit;  ///< (width): a = sigmoid(decay_logit); a small vector, Role::scalar
  Linear<T, B> w_out;       ///< (d_model, width), zero-initialised: the block starts as the identity

  ToyEma() = default;  // LM default-constructs its tuple of blocks, then assigns make()'s
  /// Decays start spread over [0.5, 0.95]: channels with short and with long memories.
  ToyEma(index_t d_model, index_t width, Rng& rng)
      : w_in(d_model, width, rng), w_out(width, d_model, rng, LinearInit::zeros) {
    std::vector<T> logits(static_cast<std::size_t>(width));
    for (index_t c = 0; c < width; ++c) {
      const double a = 0.5 + 0.45 * static_cast<double>(c) / static_cast<double>(width > 1 ? width - 1 : 1);
      logits[static_cast<std::size_t>(c)] = static_cast<T>(std::log(a / (1 - a)));
    }
    decay_logit = Param<T, B>(Tensor<T, B>::from_host(Shape{width}, logits), Role::scalar);
  }

  /// Channels of the moving average.
  index_t width() const { return w_in.out_features(); }

  /// x (batch, seq, d_model) and the batch's documents -> (batch, seq, d_model).
  V forward(const V& x, const DocumentLayout<B>& docs) const {
    return w_out.forward(document_ema(w_in.forward(x), decay_logit.var, docs));
  }

  /// An empty decode cache (every row at a document start): a fixed-size state, like Mamba's.
  ToyEmaCache<T, B> make_cache(index_t batch) const { return {Tensor<T, B>::zeros(Shape{batch, width()})}; }

  /// One decode step, x (batch, d_model) -> (batch, d_model): the forward on the next token of
  /// every row; rows with new_document[b] start a new document. Records no gradients.
  V step(const V& x, ToyEmaCache<T, B>& cache, const std::vector<bool>& new_document = {}) const {
    NoGrad no_grad;
    const char* op = "ToyEma::step";
    check(x.rank() == 2, op, "input must be (batch, d_model), got ", x.shape());
    const index_t batch = x.shape()[0], C = width();
    check(cache.h.shape() == Shape{batch, C}, op, "cache ", cache.h.shape(), " does not fit ", batch, " rows of width ",
          C, " (make it with make_cache(", batch, "))");
    check(new_document.empty() || static_cast<index_t>(new_document.size()) == batch, op, "new_document has ",
          new_document.size(), " entries for batch ", batch);
    const std::vector<T> u = w_in.forward(x).value().to_host(), logit = decay_logit.value().to_host();
    std::vector<T> h = cache.h.to_host();
    for (index_t b = 0; b < batch; ++b) {
      const bool start = !new_document.empty() && new_document[static_cast<std::size_t>(b)];
      for (index_t c = 0; c < C; ++c) {
        T& state = h[static_cast<std::size_t>(b * C + c)];
        state = ema_update(ema_decay(logit[static_cast<std::size_t>(c)]), start ? T(0) : state,
                           u[static_cast<std::size_t>(b * C + c)]);
      }
    }
    cache.h.assign(Tensor<T, B>::from_host(Shape{batch, C}, h));
    return w_out.forward(V(Tensor<T, B>::from_host(Shape{batch, C}, h)));
  }

  /// Visits "w_in.weight", "decay_logit" and "w_out.weight" under `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    w_in.for_each_param(visit, child_name(prefix, "w_in"));
    visit(child_name(prefix, "decay_logit"), decay_logit);
    w_out.for_each_param(visit, child_name(prefix, "w_out"));
  }
};

// --- the feed-forward, with an auxiliary loss ----------------------------------------------------

/// A SwiGLU feed-forward that adds an activation penalty (file comment); satisfies FeedForward.
template <class T, Backend B>
struct ToyGatedMlp {
  using value_type = T;    ///< element type
  using backend_type = B;  ///< backend
  using V = Var<T, B>;     ///< the activation type

  Linear<T, B> gate;      ///< (hidden, d_model)
  Linear<T, B> up;        ///< (hidden, d_model)
  Linear<T, B> down;      ///< (d_model, hidden), zero-initialised
  double aux_weight = 0;  ///< weight of mean(hidden^2) in the total loss; 0: not computed

  ToyGatedMlp() = default;
  /// Builds the three projections; `aux_weight` >= 0.
  ToyGatedMlp(index_t d_model, index_t hidden, double weight, Rng& rng)
      : gate(d_model, hidden, rng), up(d_model, hidden, rng), down(hidden, d_model, rng, LinearInit::zeros),
        aux_weight(weight) {}

  /// x (..., d_model) -> (..., d_model); adds aux_weight * mean(hidden^2) to `aux`.
  V forward(const V& x, AuxLosses<T, B>& aux) const {
    const V hidden = mul(silu(gate.forward(x)), up.forward(x));  // (..., hidden)
    if (aux_weight > 0) aux.add("toy_activation_l2", mean(mul(hidden, hidden)), aux_weight);
    return down.forward(hidden);
  }

  /// Visits "gate.weight", "up.weight" and "down.weight" under `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    gate.for_each_param(visit, child_name(prefix, "gate"));
    up.for_each_param(visit, child_name(prefix, "up"));
    down.for_each_param(visit, child_name(prefix, "down"));
  }
};

// --- the pattern letter -------------------------------------------------------------------------

/// The toy letter's own sizes (the model's shared sizes are its Dims). 0 means "the default".
struct ToySizes {
  index_t ema_width = 0;     ///< EMA channels; 0: d_model
  index_t ffn_hidden = 0;    ///< gated MLP width; 0: ceil(8 d_model / 3), a 4 d_model MLP's parameters
  double aux_weight = 0.01;  ///< weight of the activation penalty; 0: off

  /// ema_width, or d_model.
  constexpr index_t width(index_t d_model) const { return ema_width ? ema_width : d_model; }
  /// ffn_hidden, or ceil(8 d / 3) (Shazeer 2020, section 2: GLU variants keep a 4 d MLP's parameter
  /// count with d_ff scaled by 2/3).
  constexpr index_t hidden(index_t d_model) const { return ffn_hidden ? ffn_hidden : (8 * d_model + 2) / 3; }
};

/// Pattern letter recipe: Block<ToyEma, ToyGatedMlp> sized by S and the model's Dims.
template <ToySizes S>
struct ToyLetter {
  /// The block recipe for element type T, backend B and shared sizes D (BlockFactory).
  template <class T, class B, Dims D>
  struct factory {
    static_assert(S.ema_width >= 0 && S.ffn_hidden >= 0,
                  "megacpp_toy_negative_size: ToySizes::ema_width and ffn_hidden must be >= 0 (0: the defaults, "
                  "d_model and ceil(8 d_model / 3))");
    static_assert(S.aux_weight >= 0 && S.aux_weight <= std::numeric_limits<double>::max(),
                  "megacpp_toy_aux_weight: ToySizes::aux_weight must be finite and >= 0 (0 turns the penalty off)");

    using type = Block<ToyEma<T, B>, ToyGatedMlp<T, B>>;  ///< the block this letter builds
    /// One block, its initial weights drawn from rng (mixer first, then the feed-forward).
    static type make(Rng& rng) {
      ToyEma<T, B> mixer(D.d_model, S.width(D.d_model), rng);
      ToyGatedMlp<T, B> ffn(D.d_model, S.hidden(D.d_model), S.aux_weight, rng);
      return type(std::move(mixer), std::move(ffn));
    }
    /// "ToyEma width 32, ToyGatedMlp hidden 86 aux 0.01": part of the model's type id.
    static std::string describe() {
      std::ostringstream os;
      os << "ToyEma width " << S.width(D.d_model) << ", ToyGatedMlp hidden " << S.hidden(D.d_model) << " aux "
         << S.aux_weight;
      return os.str();
    }
  };
};

}  // namespace megacpp::toy
