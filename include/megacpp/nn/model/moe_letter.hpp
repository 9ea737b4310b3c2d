// megacpp/nn/model/moe_letter.hpp: the block recipe of pattern letter 'E', a feed-forward-only
// mixture-of-experts block.
//
//   MoELetter<MoESizes{...}, Routing>   Block<NoMixer<T, B>, MoE<T, B, Routing>>:  out = x + MoE(RMSNorm(x))
//
// 'E' stands between mixers in the recipe's patterns ("AEMEAEMEAEMR", docs/recipe.md): the
// letters A and M bring their own mixer and dense MLP, and an E layer replaces none of them but
// adds one residual MoE branch with no mixer of its own (as Nemotron-H interleaves MLP-only
// layers). So E = Block<NoMixer, MoE>; docs/moe.md has the sizes and why.
#pragma once

#include <sstream>
#include <string>

#include "megacpp/nn/block.hpp"
#include "megacpp/nn/model/pattern.hpp"
#include "megacpp/nn/moe/moe.hpp"

namespace megacpp {

/// Sizes of an MoE letter (integers: a structural type every compiler takes as a template
/// argument). Defaults: docs/moe.md.
struct MoESizes {
  index_t experts = 8;         ///< routed experts
  index_t top_k = 2;           ///< experts per token
  index_t expert_hidden = 0;   ///< each expert's width; 0: 4 d_model / top_k (a dense MLP's active FLOPs)
  index_t shared_experts = 0;  ///< always-on experts of width expert_hidden
};

/// Letter 'E': a feed-forward-only block, pre-norm MoE with routing rule `Routing`.
template <MoESizes S, class Routing = SoftmaxTopK>
struct MoELetter {
  /// The block recipe for element type T, backend B and shared sizes D.
  template <class T, class B, Dims D>
  struct factory {
    static_assert(S.experts >= 1 && S.top_k >= 1 && S.top_k <= S.experts,
                  "megacpp_dims_moe_top_k: MoESizes needs experts >= 1 and 1 <= top_k <= experts");
    static_assert(S.expert_hidden > 0 || 4 * D.d_model / S.top_k > 0,
                  "megacpp_dims_moe_hidden: set MoESizes::expert_hidden > 0 (the default 4 d_model / top_k is 0)");
    static_assert(S.expert_hidden >= 0 && S.shared_experts >= 0,
                  "megacpp_dims_negative: expert_hidden and shared_experts must be >= 0");

    using type = Block<NoMixer<T, B>, MoE<T, B, Routing>>;  ///< the block this letter builds
    /// The MoE configuration derived from S and D (balance-loss weight: MoEConfig's default).
    static MoEConfig config() {
      MoEConfig c;
      c.d_model = D.d_model;
      c.experts = S.experts;
      c.top_k = S.top_k;
      c.expert_hidden = S.expert_hidden;
      c.shared_experts = S.shared_experts;
      return c;
    }
    /// Builds one block, drawing its initial weights from rng.
    static type make(Rng& rng) { return type(NoMixer<T, B>{}, MoE<T, B, Routing>(config(), rng)); }
    /// "MoE 8x128 top2 softmax_topk".
    static std::string describe() { return MoE<T, B, Routing>::describe(config(), Routing::name); }
  };
};

}  // namespace megacpp
