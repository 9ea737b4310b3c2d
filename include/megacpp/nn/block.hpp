// megacpp/nn/block.hpp: the pre-norm residual block, Block<Mixer, FFN>.
//
//   h   = x + mixer(RMSNorm(x), documents)
//   out = h + ffn(RMSNorm(h))
// (pre-norm residual, RMSNorm without gain: RECIPE.md "Architecture floor", modded-nanogpt).
// The mixer is anything that mixes positions (attention, Mamba-3, Mamba-2) and must respect
// document boundaries; the FFN acts per position (MLP, MoE).
// Generation: make_cache(batch, capacity) and step(x, cache, new_document) run the same two
// residual branches on one token per row, the mixer advancing its decode cache (attention: a KV
// cache; Mamba: its recurrent state).
#pragma once

#include <concepts>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/nn/documents.hpp"
#include "megacpp/nn/mlp.hpp"

namespace megacpp {

/// A sequence mixer: x (batch, seq, d_model) and the batch's documents -> (batch, seq, d_model).
template <class M>
concept Mixer = requires(const M& m, const Var<typename M::value_type, typename M::backend_type>& x,
                         const DocumentLayout<typename M::backend_type>& docs) {
  { m.forward(x, docs) } -> std::same_as<Var<typename M::value_type, typename M::backend_type>>;
};

/// A mixer generation can drive: it makes a decode cache with make_cache(batch, capacity)
/// (attention: a KV cache of `capacity` tokens) or make_cache(batch) (Mamba: a fixed-size state),
/// which its step(u, cache, new_document) advances one token per row.
template <class M>
concept DecodableMixer = requires(const M& m, index_t n) { m.make_cache(n, n); } || requires(const M& m, index_t n) {
  m.make_cache(n);
};

/// Stands in for the cache of a mixer without a decode step (Block::cache_type of such a block).
struct NoDecodeCache {};

namespace detail {
// The mixer's decode cache for `batch` rows: capacity goes to mixers whose cache grows with the
// context (attention) and is dropped for fixed-size ones (Mamba's make_cache(batch)).
template <class M>
auto make_mixer_cache(const M& mixer, index_t batch, index_t capacity) {
  if constexpr (requires { mixer.make_cache(batch, capacity); }) return mixer.make_cache(batch, capacity);
  else if constexpr (requires { mixer.make_cache(batch); }) return mixer.make_cache(batch);
  else return NoDecodeCache{};
}
}  // namespace detail

/// Pre-norm residual block around a mixer and a per-position feed-forward network.
template <class MixerT, class FFN = MLP<typename MixerT::value_type, typename MixerT::backend_type, ReLU2>>
  requires Mixer<MixerT>
struct Block {
  using value_type = typename MixerT::value_type;      ///< element type, the mixer's
  using backend_type = typename MixerT::backend_type;  ///< backend, the mixer's
  using V = Var<value_type, backend_type>;             ///< the activation type

  /// The mixer's decode cache (NoDecodeCache when the mixer has no decode step).
  using cache_type = decltype(detail::make_mixer_cache(std::declval<const MixerT&>(), index_t{}, index_t{}));

  MixerT mixer;            ///< sequence mixer of the first residual branch
  FFN ffn;                 ///< per-position feed-forward network of the second residual branch
  double norm_eps = 1e-6;  ///< epsilon of both RMSNorms

  Block() = default;
  /// Builds the block from a mixer and a feed-forward network.
  Block(MixerT m, FFN f) : mixer(std::move(m)), ffn(std::move(f)) {}

  /// x (batch, seq, d_model) -> (batch, seq, d_model)
  V forward(const V& x, const DocumentLayout<backend_type>& docs) const {
    const V h = x + mixer.forward(rmsnorm(x, norm_eps), docs);
    return h + ffn.forward(rmsnorm(h, norm_eps));
  }

  /// An empty decode cache for `batch` rows; `capacity` (tokens per document) is used by mixers
  /// whose cache grows with the context (attention) and ignored by fixed-state ones (Mamba).
  cache_type make_cache(index_t batch, index_t capacity) const {
    static_assert(DecodableMixer<MixerT>,
                  "megacpp_mixer_has_no_decode_step: give the mixer make_cache(batch[, capacity]) and "
                  "step(u, cache, new_document) (see Attention or Mamba3) to generate with this block");
    return detail::make_mixer_cache(mixer, batch, capacity);
  }

  /// One decode step, x (batch, d_model) -> (batch, d_model): the forward's residual branches on
  /// one token per row. Rows with new_document[b] start a new document. Records no gradients.
  V step(const V& x, cache_type& cache, const std::vector<bool>& new_document = {}) const {
    static_assert(DecodableMixer<MixerT>,
                  "megacpp_mixer_has_no_decode_step: give the mixer make_cache(batch[, capacity]) and "
                  "step(u, cache, new_document) (see Attention or Mamba3) to generate with this block");
    NoGrad no_grad;
    const V h = x + mixer.step(rmsnorm(x, norm_eps), cache, new_document);
    return h + ffn.forward(rmsnorm(h, norm_eps));
  }

  /// Visits the mixer's parameters under "mixer" and the FFN's under "ffn", within `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    mixer.for_each_param(visit, child_name(prefix, "mixer"));
    ffn.for_each_param(visit, child_name(prefix, "ffn"));
  }
};

}  // namespace megacpp
