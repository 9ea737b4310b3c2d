// megacpp/nn/attention/attention.hpp: the GQA attention layer, Attention<T, B, Policies...>.
//
//   q = x Wq^T (B, T, H, D);  k = x Wk^T, v = x Wv^T (B, T, Hkv, D)
//   q, k = rmsnorm(q), rmsnorm(k)                   (QKNorm policy; off by default)
//   q, k = rope(q, pos), rope(k, pos)               pos restarts at every document by default
//   o = attention(q, k, v)                           GQA: head h reads kv head h / (H / Hkv);
//                                                    scores softcapped, masked to own document,
//                                                    causal, sliding window (core/kernels/attention.hpp)
//   y = o Wo^T (B, T, d_model),  Wo zero-initialised (the block starts as the identity)
// docs/recipe.md "Architecture floor": n_kv_heads = n_heads / 4, softcap 50, no QK-norm, pre-norm
// blocks; "Document masking": doc_ids and positions come from DocumentLayout (computed once per
// batch from input_ids), and the fused kernel never computes a tile across documents.
//
// Use:  Block<GQA<float, Cpu>> (softcap 50) or Block<GQA<float, Cpu, NoSoftcap, Scale<12, 100>, QKNorm>>;
// make_attention_block builds one with its MLP<ReLU2>. Generation: make_cache + step, one token per
// row at a time over a KV cache (nn/attention/decode.hpp), the same math as forward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/ops/rope.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/nn/attention/decode.hpp"
#include "megacpp/nn/attention/flash_attention.hpp"
#include "megacpp/nn/attention/policies.hpp"
#include "megacpp/nn/attention/yarn.hpp"
#include "megacpp/nn/block.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/mlp.hpp"

namespace megacpp {

/// Runtime sizes and options of an attention layer (compile-time options are policies).
struct AttentionConfig {
  index_t d_model = 0;         ///< model width
  index_t n_heads = 0;         ///< query heads
  index_t n_kv_heads = 0;      ///< key/value heads; 0: max(1, n_heads / 4)
  index_t head_dim = 0;        ///< features per head; 0: d_model / n_heads
  bool rope = true;            ///< rotary position embedding on q and k
  double rope_theta = 10000.0; ///< RoPE base (curriculum: 1e4, 5e5, 1e6)
  Yarn yarn{};                 ///< YaRN context extension (factor 1: off)
  index_t window = 0;          ///< sliding window in tokens (0: whole document)
  index_t max_seq = 65536;     ///< longest sequence forward accepts
  AttentionTiles tiles{};      ///< fused kernel tiling hints (0: the backend's defaults)
};

/// Grouped-query attention with document masking, policies for softcap, scale and QK-norm
/// (megacpp/nn/attention/policies.hpp). Satisfies the Mixer concept of Block.
template <class T, Backend B, class... Policies>
struct Attention {
  static_assert(detail::check_attention_policies<Policies...>());

  using value_type = T;    ///< element type of activations and weights
  using backend_type = B;  ///< backend the layer runs on
  /// Score soft-capping policy (default Softcap<50>).
  using SoftcapPolicy = typename detail::pick_policy<attention_policy::softcap_kind, Softcap<50>, Policies...>::type;
  /// Score scale policy (default InvSqrtHeadDim).
  using ScalePolicy = typename detail::pick_policy<attention_policy::scale_kind, InvSqrtHeadDim, Policies...>::type;
  /// QK-norm policy (default NoQKNorm).
  using QKNormPolicy = typename detail::pick_policy<attention_policy::qk_norm_kind, NoQKNorm, Policies...>::type;

  AttentionConfig config;  ///< resolved: n_kv_heads and head_dim filled in
  Linear<T, B> wq;         ///< (n_heads * head_dim, d_model)
  Linear<T, B> wk;         ///< (n_kv_heads * head_dim, d_model)
  Linear<T, B> wv;         ///< (n_kv_heads * head_dim, d_model)
  Linear<T, B> wo;         ///< (d_model, n_heads * head_dim), zero-initialised
  Tensor<T, B> inv_freq;   ///< (head_dim / 2) RoPE (or YaRN) frequencies; undefined without RoPE

  Attention() = default;
  /// Builds the layer; throws megacpp::Error naming the bad value for an inconsistent config.
  Attention(const AttentionConfig& cfg, Rng& rng)
      : config(resolve(cfg)),
        wq(config.d_model, config.n_heads * config.head_dim, rng),
        wk(config.d_model, config.n_kv_heads * config.head_dim, rng),
        wv(config.d_model, config.n_kv_heads * config.head_dim, rng),
        wo(config.n_heads * config.head_dim, config.d_model, rng, LinearInit::zeros) {
    if (config.rope) inv_freq = rope_frequencies<T, B>(config.head_dim, config.rope_theta, config.yarn);
  }

  /// Fills the defaults of `cfg` and checks it (GQA divisibility, even head_dim for RoPE, ...).
  static AttentionConfig resolve(AttentionConfig cfg) {
    const std::string op = "Attention";
    check(cfg.d_model > 0 && cfg.n_heads > 0, op, "d_model and n_heads must be positive, got d_model ", cfg.d_model,
          ", n_heads ", cfg.n_heads);
    if (cfg.n_kv_heads == 0) cfg.n_kv_heads = std::max<index_t>(1, cfg.n_heads / 4);
    check(cfg.n_kv_heads > 0 && cfg.n_heads % cfg.n_kv_heads == 0, op, "n_heads ", cfg.n_heads,
          " is not divisible by n_kv_heads ", cfg.n_kv_heads, " (GQA: query head h reads kv head h / (n_heads / n_kv_heads))");
    if (cfg.head_dim == 0) {
      check(cfg.d_model % cfg.n_heads == 0, op, "d_model ", cfg.d_model, " is not divisible by n_heads ", cfg.n_heads,
            "; set head_dim explicitly");
      cfg.head_dim = cfg.d_model / cfg.n_heads;
    }
    check(cfg.head_dim > 0, op, "head_dim must be positive, got ", cfg.head_dim);
    check(!cfg.rope || cfg.head_dim % 2 == 0, op, "head_dim ", cfg.head_dim,
          " is odd: RoPE rotates feature pairs (i, i + head_dim / 2); use an even head_dim or rope = false");
    check(!cfg.rope || cfg.rope_theta > 0, op, "rope_theta must be positive, got ", cfg.rope_theta);
    check(cfg.window >= 0, op, "window must be >= 0 tokens (0: none), got ", cfg.window);
    check(cfg.max_seq > 0, op, "max_seq must be positive, got ", cfg.max_seq);
    cfg.yarn.validate(op);
    return cfg;
  }

  /// True when the layer rotates q and k (config.rope).
  bool uses_rope() const { return config.rope; }

  /// Sets the RoPE base (the context curriculum raises it between phases, megacpp/train/
  /// curriculum.hpp) and rebuilds the frequency table, YaRN settings kept; weights are unchanged.
  void set_rope_theta(double theta) {
    check(config.rope, "Attention::set_rope_theta", "this layer has no RoPE (config.rope = false)");
    check(theta > 0 && std::isfinite(theta), "Attention::set_rope_theta", "rope_theta must be positive, got ", theta);
    config.rope_theta = theta;
    inv_freq = rope_frequencies<T, B>(config.head_dim, theta, config.yarn);
  }

  /// Sets the YaRN extension (factor 1: off) and rebuilds the frequency table; the score scale
  /// picks up the new attention factor (options()).
  void set_yarn(const Yarn& yarn) {
    check(config.rope, "Attention::set_yarn", "this layer has no RoPE (config.rope = false)");
    yarn.validate("Attention::set_yarn");
    config.yarn = yarn;
    inv_freq = rope_frequencies<T, B>(config.head_dim, config.rope_theta, yarn);
  }

  /// Score options the kernel gets: scale (times YaRN's attention factor squared, since it
  /// multiplies both q and k), softcap and window.
  AttentionOptions options() const {
    const double yarn_factor = config.rope ? config.yarn.attention_factor() : 1.0;
    return {ScalePolicy::scale(config.head_dim) * yarn_factor * yarn_factor, SoftcapPolicy::cap, config.window,
            config.tiles};
  }

  /// x (batch, seq, d_model) -> (batch, seq, d_model), with the fused kernel.
  Var<T, B> forward(const Var<T, B>& x, const DocumentLayout<B>& docs) const {
    return forward_with(x, docs, [](const Var<T, B>& q, const Var<T, B>& k, const Var<T, B>& v,
                                    const DocumentLayout<B>& d, const AttentionOptions& o) { return flash_attention(q, k, v, d, o); });
  }

  /// The same layer with another attention kernel `attend(q, k, v, docs, options)`, e.g. the dense
  /// reference in tests.
  template <class Kernel>
  Var<T, B> forward_with(const Var<T, B>& x, const DocumentLayout<B>& docs, Kernel&& attend) const {
    const std::string op = "Attention";
    check(x.rank() == 3 && x.shape()[2] == config.d_model, op, "x must be (batch, seq, d_model = ", config.d_model,
          "), got ", x.shape());
    const index_t batch = x.shape()[0], seq = x.shape()[1];
    check(seq <= config.max_seq, op, "sequence length ", seq, " exceeds the configured maximum max_seq = ", config.max_seq);
    docs.check_matches(op, batch, seq);
    const index_t H = config.n_heads, Hkv = config.n_kv_heads, D = config.head_dim;
    Var<T, B> q = reshape(wq.forward(x), Shape{batch, seq, H, D});    // (B, T, H, D)
    Var<T, B> k = reshape(wk.forward(x), Shape{batch, seq, Hkv, D});  // (B, T, Hkv, D)
    const Var<T, B> v = reshape(wv.forward(x), Shape{batch, seq, Hkv, D});
    if constexpr (QKNormPolicy::enabled) {
      q = rmsnorm(q);
      k = rmsnorm(k);
    }
    if (config.rope) {
      q = rope(q, docs.positions, inv_freq);
      k = rope(k, docs.positions, inv_freq);
    }
    const Var<T, B> o = attend(q, k, v, docs, options());  // (B, T, H, D)
    return wo.forward(reshape(o, Shape{batch, seq, H * D}));
  }

  /// An empty decode cache for `batch` rows of documents up to `capacity` tokens. With a sliding
  /// window only the last `window` keys are ever visible, so at most `window` slots are kept
  /// (a ring buffer: documents of any length up to max_seq then fit).
  AttentionCache<T, B> make_cache(index_t batch, index_t capacity) const {
    check(capacity > 0, "Attention::make_cache", "capacity must be positive, got ", capacity);
    const index_t slots = config.window > 0 ? std::min(capacity, config.window) : capacity;
    return AttentionCache<T, B>::zeros(batch, slots, config.n_kv_heads, config.head_dim);
  }

  /// One decode step: u (batch, d_model), the token after each row's cached ones -> (batch,
  /// d_model). Rows with new_document[b] start a new document (cache row reset first); an empty
  /// vector means none does. Same projections, QK-norm and RoPE ops as forward; the attention
  /// itself is the DecodeAttention kernel (the cache never leaves backend memory). Records no
  /// gradients.
  Var<T, B> step(const Var<T, B>& u, AttentionCache<T, B>& cache, const std::vector<bool>& new_document = {}) const {
    NoGrad no_grad;
    const char* op = "Attention::step";
    check(u.rank() == 2 && u.shape()[1] == config.d_model, op, "input must be (batch, ", config.d_model, "), got ",
          u.shape());
    const index_t batch = u.shape()[0], H = config.n_heads, Hkv = config.n_kv_heads, D = config.head_dim;
    detail::check_cache_shape(op, "k", cache.k.shape(), Shape{batch, cache.capacity(), Hkv, D});
    detail::check_cache_shape(op, "v", cache.v.shape(), cache.k.shape());
    check(new_document.empty() || static_cast<index_t>(new_document.size()) == batch, op, "new_document has ",
          new_document.size(), " entries for batch ", batch);
    for (index_t b = 0; b < static_cast<index_t>(new_document.size()); ++b)
      if (new_document[static_cast<std::size_t>(b)]) cache.reset(b);
    detail::check_cache_room(op, cache, config.window);
    std::vector<std::int32_t> pos(cache.position.begin(), cache.position.end());
    for (index_t b = 0; b < batch; ++b)
      check(pos[static_cast<std::size_t>(b)] < config.max_seq, op, "row ", b, ": document position ",
            pos[static_cast<std::size_t>(b)], " reaches max_seq = ", config.max_seq);

    const Var<T, B> x = reshape(u, Shape{batch, 1, config.d_model});
    Var<T, B> q = reshape(wq.forward(x), Shape{batch, 1, H, D});    // (B, 1, H, D)
    Var<T, B> k = reshape(wk.forward(x), Shape{batch, 1, Hkv, D});  // (B, 1, Hkv, D)
    const Var<T, B> v = reshape(wv.forward(x), Shape{batch, 1, Hkv, D});
    if constexpr (QKNormPolicy::enabled) {
      q = rmsnorm(q);
      k = rmsnorm(k);
    }
    if (config.rope) {  // the forward's own rope op: the same angles, bit for bit
      const auto positions = Tensor<std::int32_t, B>::from_host(Shape{batch, 1}, pos);
      q = rope(q, positions, inv_freq);
      k = rope(k, positions, inv_freq);
    }
    const Tensor<T, B> o = detail::attend_one_step(cache, options(), config.window, H, q.value(), k.value(), v.value());
    return reshape(wo.forward(Var<T, B>(o)), Shape{batch, config.d_model});
  }

  /// Visits "wq", "wk", "wv", "wo" (each ".weight") under `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    wq.for_each_param(visit, child_name(prefix, "wq"));
    wk.for_each_param(visit, child_name(prefix, "wk"));
    wv.for_each_param(visit, child_name(prefix, "wv"));
    wo.for_each_param(visit, child_name(prefix, "wo"));
  }
};

/// GQA<T, B, Policies...>: the attention layer under the name the recipe uses.
template <class T, Backend B, class... Policies>
using GQA = Attention<T, B, Policies...>;

/// Pre-norm residual block with GQA attention and the MLP<ReLU2> feed-forward.
template <class T, Backend B, class... Policies>
using AttentionBlock = Block<GQA<T, B, Policies...>>;

/// Builds an AttentionBlock: attention from `config`, MLP with hidden = 4 d_model.
template <class T, Backend B, class... Policies>
AttentionBlock<T, B, Policies...> make_attention_block(const AttentionConfig& config, Rng& rng) {
  GQA<T, B, Policies...> attention(config, rng);
  MLP<T, B> mlp(attention.config.d_model, rng);
  return AttentionBlock<T, B, Policies...>(std::move(attention), std::move(mlp));
}

}  // namespace megacpp
