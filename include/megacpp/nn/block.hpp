// megacpp/nn/block.hpp: the pre-norm residual block, Block<Mixer, FFN>.
//
//   h   = x + mixer(RMSNorm(x), documents)
//   out = h + ffn(RMSNorm(h))
// (pre-norm residual, RMSNorm without gain: RECIPE.md "Architecture floor", modded-nanogpt).
// The mixer is anything that mixes positions (attention, Mamba-3, Mamba-2) and must respect
// document boundaries; the FFN acts per position (MLP, MoE).
#pragma once

#include <concepts>
#include <string>

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

/// Pre-norm residual block around a mixer and a per-position feed-forward network.
template <class MixerT, class FFN = MLP<typename MixerT::value_type, typename MixerT::backend_type, ReLU2>>
  requires Mixer<MixerT>
struct Block {
  using value_type = typename MixerT::value_type;      ///< element type, the mixer's
  using backend_type = typename MixerT::backend_type;  ///< backend, the mixer's
  using V = Var<value_type, backend_type>;             ///< the activation type

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

  /// Visits the mixer's parameters under "mixer" and the FFN's under "ffn", within `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    mixer.for_each_param(visit, child_name(prefix, "mixer"));
    ffn.for_each_param(visit, child_name(prefix, "ffn"));
  }
};

}  // namespace megacpp
