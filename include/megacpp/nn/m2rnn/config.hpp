// megacpp/nn/m2rnn/config.hpp: dimensions and initialisation of the M2RNN mixer.
//
// Defaults follow the public reference layer, open-lm-engine/lm-engine
// lm_engine/hf_models/modeling_utils/sequence_mixer_blocks/m2rnn.py (M2RNN, Mishra, Tan, Stoica,
// Gonzalez, Dao; arXiv 2603.14360) and its SoftplusDecayGate (decay_gate.py): key head dim 64,
// value head dim 16, causal conv width 4, A = exp(A_log) with A uniform in [0, 16] at init, dt in
// [0.001, 0.1] (floor 1e-4) at init, state weight W = I, D = 1. Where the reference leaves a choice
// to the caller (heads, conv activation, gradient clipping) docs/m2rnn.md says what we picked.
#pragma once

#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/causal_conv1d.hpp"

namespace megacpp {

/// M2RNN dimensions and initialisation.
struct M2RNNConfig {
  index_t d_model = 0;             ///< width of the residual stream
  index_t heads = 0;               ///< recurrent heads (one K x V state each); 0: max(1, d_model / k_head_dim)
  index_t k_head_dim = 64;         ///< K: rows of each head's state (query and key width)
  index_t v_head_dim = 16;         ///< V: columns of each head's state (value width); W is V x V
  index_t conv_kernel = 4;         ///< width of the causal depthwise conv over [q, k, v]
  double A_init_min = 0.0;         ///< A = exp(A_log), uniform in [A_init_min, A_init_max] at init
  double A_init_max = 16.0;        ///< upper end of A at init
  double dt_min = 0.001;           ///< softplus(dt_bias) at init is log-uniform in [dt_min, dt_max]
  double dt_max = 0.1;             ///< upper end of dt at init
  double dt_init_floor = 1e-4;     ///< dt at init is at least this
  double gradient_clipping = 0.0;  ///< clamp the state gradient to [-c, c] in the backward; 0: exact BPTT
  index_t checkpoint_every = 64;   ///< training keeps the state every this many tokens and recomputes the rest
  double norm_eps = 1e-5;          ///< eps of the RMSNorm before out_proj
  bool zero_init_out_proj = true;  ///< zero out_proj at init (residual branch starts as identity, as the Mamba mixers)

  /// heads, or its default max(1, d_model / k_head_dim).
  index_t n_heads() const { return heads ? heads : (d_model / k_head_dim > 0 ? d_model / k_head_dim : 1); }
  /// Channels of the conv1d: q, k and v, heads (2 K + V).
  index_t conv_dim() const { return n_heads() * (2 * k_head_dim + v_head_dim); }
  /// Width of the recurrence's output and of the gate: heads V.
  index_t inner() const { return n_heads() * v_head_dim; }

  /// Throws megacpp::Error naming the value when the layer cannot be built.
  void validate(const char* who) const {
    check(d_model > 0 && heads >= 0 && k_head_dim > 0 && v_head_dim > 0, who,
          "d_model, k_head_dim and v_head_dim must be positive and heads >= 0 (0 = default), got d_model ", d_model,
          ", heads ", heads, ", k_head_dim ", k_head_dim, ", v_head_dim ", v_head_dim);
    check(conv_kernel >= 1 && conv_kernel <= kMaxConv1dWidth, who, "conv_kernel must be in [1, ", kMaxConv1dWidth, "], got ",
          conv_kernel);
    check(A_init_min >= 0 && A_init_max >= A_init_min && A_init_max > 0, who,
          "need 0 <= A_init_min <= A_init_max and A_init_max > 0, got ", A_init_min, ", ", A_init_max);
    check(dt_min > 0 && dt_max >= dt_min && dt_init_floor > 0, who, "need 0 < dt_min <= dt_max and dt_init_floor > 0, got ",
          dt_min, ", ", dt_max, ", ", dt_init_floor);
    check(checkpoint_every >= 1, who, "checkpoint_every must be >= 1, got ", checkpoint_every);
    check(gradient_clipping >= 0, who, "gradient_clipping must be >= 0 (0 = none), got ", gradient_clipping);
    check(norm_eps > 0, who, "norm_eps must be positive, got ", norm_eps);
  }
};

}  // namespace megacpp
