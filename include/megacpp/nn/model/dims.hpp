// megacpp/nn/model/dims.hpp: a model's sizes as a compile-time value.
//
// Dims is a structural type, so it is a template argument: LM<float, Cpu, Dims{...}, ...> with
// other sizes is another type (DESIGN.md: "each specialist size is its own type"), and an
// inconsistent size is a compile error (validate_dims) rather than a run-time surprise.
#pragma once

#include "megacpp/core/config.hpp"

namespace megacpp {

/// Sizes of a language model. Zero means "derive the default" where a comment says so.
struct Dims {
  index_t d_model = 0;        ///< width of the residual stream
  index_t n_layers = 0;       ///< blocks; the pattern repeats to fill them
  index_t n_heads = 0;        ///< attention query heads
  index_t n_kv_heads = 0;     ///< attention key/value heads; 0: n_heads / 4 (RECIPE.md GQA floor)
  index_t vocab = 0;          ///< vocabulary (tied embedding and head)
  index_t mlp_hidden = 0;     ///< MLP width; 0: 4 * d_model (modded-nanogpt)
  index_t head_dim = 0;       ///< attention head width; 0: d_model / n_heads
  index_t mamba_d_state = 128;  ///< Mamba N (reference default)
  index_t mamba_headdim = 64;   ///< Mamba P (reference default)
  index_t mamba_expand = 2;     ///< Mamba d_inner / d_model (reference default)
  index_t max_seq = 65536;      ///< longest sequence the attention accepts

  /// n_kv_heads, or its default n_heads / 4 (at least 1).
  constexpr index_t kv_heads() const { return n_kv_heads ? n_kv_heads : (n_heads / 4 > 0 ? n_heads / 4 : 1); }
  /// head_dim, or its default d_model / n_heads.
  constexpr index_t attention_head_dim() const { return head_dim ? head_dim : (n_heads ? d_model / n_heads : 0); }
  /// mlp_hidden, or its default 4 * d_model.
  constexpr index_t mlp_width() const { return mlp_hidden ? mlp_hidden : 4 * d_model; }
};

/// Compile-time checks of a Dims value; each message says what to change.
template <Dims D>
constexpr bool validate_dims() {
  static_assert(D.d_model > 0 && D.n_layers > 0 && D.vocab > 0,
                "megacpp_dims_incomplete: set d_model, n_layers and vocab (all > 0)");
  static_assert(D.n_heads > 0, "megacpp_dims_no_heads: set n_heads > 0");
  static_assert(D.head_dim > 0 || D.d_model % D.n_heads == 0,
                "megacpp_dims_head_split: d_model must be divisible by n_heads, or set head_dim");
  static_assert(D.n_heads % D.kv_heads() == 0,
                "megacpp_dims_gqa: n_heads must be divisible by n_kv_heads (query head h reads kv head h / (n_heads / n_kv_heads))");
  static_assert(D.attention_head_dim() % 2 == 0, "megacpp_dims_rope: the attention head_dim must be even for RoPE");
  static_assert((D.mamba_expand * D.d_model) % D.mamba_headdim == 0,
                "megacpp_dims_mamba_heads: mamba_expand * d_model must be divisible by mamba_headdim");
  return true;
}

}  // namespace megacpp
