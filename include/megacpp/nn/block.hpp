// megacpp/nn/block.hpp: the pre-norm residual block, Block<Mixer, FeedForward>, and the two
// concepts every block part meets.
//
//   h   = x + mixer(RMSNorm(x), documents)
//   out = h + ffn(RMSNorm(h))
// (pre-norm residual, RMSNorm without gain: docs/architecture.md "Model composition",
// modded-nanogpt). The mixer is anything that mixes positions (attention, Mamba-3, Mamba-2) and
// must respect document boundaries; the feed-forward network acts per position (MLP, MoE).
// NoMixer or NoFeedForward drops that residual branch entirely (a feed-forward-only or a
// mixer-only layer, as hybrid stacks such as Nemotron-H interleave them).
//
// Auxiliary losses: a mixer or feed-forward whose forward takes an AuxLosses collector as its last
// argument (forward(x, docs, aux) / forward(x, aux)) gets the block's; the others are called
// without one. Generation: make_cache(batch, capacity) and step(x, cache, new_document) run the
// same residual branches on one token per row, the mixer advancing its decode cache (attention:
// a KV cache; Mamba: its recurrent state). docs/extending.md adds a mixer and a feed-forward.
#pragma once

#include <concepts>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/module.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/nn/aux_loss.hpp"
#include "megacpp/nn/mlp.hpp"

namespace megacpp {

/// A sequence mixer: x (batch, seq, d_model) and the batch's documents -> (batch, seq, d_model),
/// optionally adding auxiliary losses; visits its parameters.
template <class M>
concept Mixer = requires(const M& cm, const Var<typename M::value_type, typename M::backend_type>& x,
                         const DocumentLayout<typename M::backend_type>& docs,
                         AuxLosses<typename M::value_type, typename M::backend_type>& aux) {
  requires Backend<typename M::backend_type>;
  requires requires { { cm.forward(x, docs) } -> std::same_as<Var<typename M::value_type, typename M::backend_type>>; } ||
               requires { { cm.forward(x, docs, aux) } -> std::same_as<Var<typename M::value_type, typename M::backend_type>>; };
  requires Module<M, typename M::value_type, typename M::backend_type>;
  requires std::default_initializable<M>;  // LM holds its blocks in a std::tuple built then assigned
};

/// A per-position network: x (..., d_model) -> (..., d_model), optionally adding auxiliary
/// losses; visits its parameters.
template <class F>
concept FeedForward = requires(const F& cf, const Var<typename F::value_type, typename F::backend_type>& x,
                               AuxLosses<typename F::value_type, typename F::backend_type>& aux) {
  requires Backend<typename F::backend_type>;
  requires requires { { cf.forward(x) } -> std::same_as<Var<typename F::value_type, typename F::backend_type>>; } ||
               requires { { cf.forward(x, aux) } -> std::same_as<Var<typename F::value_type, typename F::backend_type>>; };
  requires Module<F, typename F::value_type, typename F::backend_type>;
  requires std::default_initializable<F>;
};

/// Stands in for the mixer of a block that has none: the block is x + ffn(RMSNorm(x)).
template <class T, Backend B>
struct NoMixer {
  using value_type = T;    ///< element type
  using backend_type = B;  ///< backend
};

/// Stands in for the feed-forward of a block that has none: the block is x + mixer(RMSNorm(x)).
template <class T, Backend B>
struct NoFeedForward {
  using value_type = T;    ///< element type
  using backend_type = B;  ///< backend
};

/// A mixer generation can drive: it makes a decode cache with make_cache(batch, capacity)
/// (attention: a KV cache of `capacity` tokens) or make_cache(batch) (Mamba: a fixed-size state),
/// which its step(u, cache, new_document) advances one token per row.
template <class M>
concept DecodableMixer = requires(const M& m, index_t n) { m.make_cache(n, n); } || requires(const M& m, index_t n) {
  m.make_cache(n);
};

/// Stands in for the cache of a block whose mixer keeps no decode state (NoMixer).
struct NoDecodeCache {};

namespace detail {
template <class X>
inline constexpr bool is_no_mixer = false;
template <class T, class B>
inline constexpr bool is_no_mixer<NoMixer<T, B>> = true;
template <class X>
inline constexpr bool is_no_feed_forward = false;
template <class T, class B>
inline constexpr bool is_no_feed_forward<NoFeedForward<T, B>> = true;

// The mixer's decode cache for `batch` rows: capacity goes to mixers whose cache grows with the
// context (attention) and is dropped for fixed-size ones (Mamba's make_cache(batch)).
template <class M>
auto make_mixer_cache(const M& mixer, index_t batch, index_t capacity) {
  if constexpr (requires { mixer.make_cache(batch, capacity); }) return mixer.make_cache(batch, capacity);
  else if constexpr (requires { mixer.make_cache(batch); }) return mixer.make_cache(batch);
  else return NoDecodeCache{};
}

// part.forward(args..., aux) when the part takes a collector, else part.forward(args...).
template <class Part, class Aux, class... Args>
auto forward_part(const Part& part, Aux* aux, const Args&... args) {
  if constexpr (requires { part.forward(args..., *aux); }) {
    if (aux) return part.forward(args..., *aux);
    Aux unused;  // the caller does not collect: the part's losses are computed and dropped
    return part.forward(args..., unused);
  } else {
    return part.forward(args...);
  }
}
}  // namespace detail

/// Pre-norm residual block around a mixer and a per-position feed-forward network.
template <class MixerT, class FFN = MLP<typename MixerT::value_type, typename MixerT::backend_type, ReLU2>>
struct Block {
  using value_type = typename MixerT::value_type;      ///< element type, the mixer's
  using backend_type = typename MixerT::backend_type;  ///< backend, the mixer's
  using V = Var<value_type, backend_type>;             ///< the activation type
  using Aux = AuxLosses<value_type, backend_type>;     ///< the auxiliary-loss collector

  static constexpr bool has_mixer = !detail::is_no_mixer<MixerT>;         ///< false for NoMixer
  static constexpr bool has_feed_forward = !detail::is_no_feed_forward<FFN>;  ///< false for NoFeedForward
  static_assert(!has_mixer || Mixer<MixerT>,
                "megacpp_block_needs_a_mixer: Block<M, F>'s first argument must be a Mixer (value_type, backend_type, "
                "forward(x, docs) or forward(x, docs, aux) -> Var, for_each_param, default constructible), or NoMixer<T, B>; a per-position "
                "network such as MLP goes second (see docs/extending.md)");
  static_assert(!has_feed_forward || FeedForward<FFN>,
                "megacpp_block_needs_a_feed_forward: Block<M, F>'s second argument must be a FeedForward (value_type, "
                "backend_type, forward(x) or forward(x, aux) -> Var, for_each_param, default constructible), or NoFeedForward<T, B>; a "
                "sequence mixer goes first (see docs/extending.md)");
  static_assert(std::is_same_v<typename FFN::value_type, value_type> && std::is_same_v<typename FFN::backend_type, backend_type>,
                "megacpp_block_parts_disagree: the mixer and the feed-forward of a Block must have the same element "
                "type and backend");
  static_assert(has_mixer || has_feed_forward, "megacpp_block_is_empty: a Block needs a mixer, a feed-forward or both");

  /// The mixer's decode cache (NoDecodeCache when the mixer has no decode step).
  using cache_type = decltype(detail::make_mixer_cache(std::declval<const MixerT&>(), index_t{}, index_t{}));

  MixerT mixer;            ///< sequence mixer of the first residual branch
  FFN ffn;                 ///< per-position feed-forward network of the second residual branch
  double norm_eps = 1e-6;  ///< epsilon of both RMSNorms

  Block() = default;
  /// Builds the block from a mixer and a feed-forward network.
  Block(MixerT m, FFN f) : mixer(std::move(m)), ffn(std::move(f)) {}

  /// x (batch, seq, d_model) -> (batch, seq, d_model); auxiliary losses of the parts, if any,
  /// are computed and dropped (use the overload with a collector to keep them).
  V forward(const V& x, const DocumentLayout<backend_type>& docs) const { return forward_impl(x, docs, nullptr); }

  /// The same, adding the mixer's and the feed-forward's auxiliary losses to `aux`.
  V forward(const V& x, const DocumentLayout<backend_type>& docs, Aux& aux) const { return forward_impl(x, docs, &aux); }

  /// An empty decode cache for `batch` rows; `capacity` (tokens per document) is used by mixers
  /// whose cache grows with the context (attention) and ignored by fixed-state ones (Mamba).
  cache_type make_cache(index_t batch, index_t capacity) const {
    static_assert(!has_mixer || DecodableMixer<MixerT>,
                  "megacpp_mixer_has_no_decode_step: give the mixer make_cache(batch[, capacity]) and "
                  "step(u, cache, new_document) (see Attention or Mamba3) to generate with this block");
    if constexpr (has_mixer) return detail::make_mixer_cache(mixer, batch, capacity);
    else return NoDecodeCache{};
  }

  /// One decode step, x (batch, d_model) -> (batch, d_model): the forward's residual branches on
  /// one token per row. Rows with new_document[b] start a new document. Records no gradients.
  V step(const V& x, cache_type& cache, const std::vector<bool>& new_document = {}) const {
    static_assert(!has_mixer || DecodableMixer<MixerT>,
                  "megacpp_mixer_has_no_decode_step: give the mixer make_cache(batch[, capacity]) and "
                  "step(u, cache, new_document) (see Attention or Mamba3) to generate with this block");
    NoGrad no_grad;
    V h = x;
    if constexpr (has_mixer) h = x + mixer.step(rmsnorm(x, norm_eps), cache, new_document);
    if constexpr (has_feed_forward) h = h + detail::forward_part(ffn, static_cast<Aux*>(nullptr), rmsnorm(h, norm_eps));
    return h;
  }

  /// Visits the mixer's parameters under "mixer" and the FFN's under "ffn", within `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    if constexpr (has_mixer) mixer.for_each_param(visit, child_name(prefix, "mixer"));
    if constexpr (has_feed_forward) ffn.for_each_param(visit, child_name(prefix, "ffn"));
  }

  /// Visits the non-trainable state of mixer and feed-forward (autograd/module.hpp), if any.
  template <class Visitor>
  void for_each_state(Visitor&& visit, const std::string& prefix = "") {
    if constexpr (has_mixer) visit_state(mixer, visit, child_name(prefix, "mixer"));
    if constexpr (has_feed_forward) visit_state(ffn, visit, child_name(prefix, "ffn"));
  }

 private:
  V forward_impl(const V& x, const DocumentLayout<backend_type>& docs, Aux* aux) const {
    V h = x;
    if constexpr (has_mixer) {
      const auto scope = aux ? std::optional<typename Aux::Scope>(std::in_place, *aux, "mixer") : std::nullopt;
      h = x + detail::forward_part(mixer, aux, rmsnorm(x, norm_eps), docs);
    }
    if constexpr (has_feed_forward) {
      const auto scope = aux ? std::optional<typename Aux::Scope>(std::in_place, *aux, "ffn") : std::nullopt;
      h = h + detail::forward_part(ffn, aux, rmsnorm(h, norm_eps));
    }
    return h;
  }
};

}  // namespace megacpp
