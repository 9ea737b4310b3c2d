// megacpp/nn/model/letters.hpp: the library's block recipes for pattern letters, each with its own
// sizes.
//
//   AttentionLetter<AttentionSizes{...}>   Block<GQA<T, B>> + MLP<ReLU2>   (softcap 50, RoPE, doc-masked)
//   Mamba3Letter<MambaSizes{...}, Policy, AAct>  Block<Mamba3<T, B, Policy, AAct>> + MLP<ReLU2>
//                                          (SISO or MIMO<R>; A activation HeavyTailA or SoftplusA)
//   Mamba2Letter<MambaSizes{...}>          Block<Mamba2<T, B>> + MLP<ReLU2>
//   M2RNNLetter<M2RNNSizes{...}>           Block<M2RNN<T, B>> + MLP<ReLU2>   (the recurrent tail 'R')
//
// A letter's sizes are its own (heads, state size, MLP width); the sizes every block shares are the
// model's Dims. Sizes are structural types, so they are template arguments and every size is part
// of the model's type. Inconsistent sizes fail to compile with a greppable id saying what to
// change (megacpp_dims_gqa, ...), each tested in tests/model/negative/.
#pragma once

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "megacpp/nn/attention.hpp"
#include "megacpp/nn/m2rnn.hpp"
#include "megacpp/nn/mamba.hpp"
#include "megacpp/nn/model/pattern.hpp"

namespace megacpp {

/// Sizes of an attention letter. Zero means "derive the default" where a comment says so.
struct AttentionSizes {
  index_t n_heads = 0;     ///< query heads
  index_t n_kv_heads = 0;  ///< key/value heads; 0: max(1, n_heads / 4) (the recipe's GQA floor)
  index_t head_dim = 0;    ///< features per head; 0: d_model / n_heads
  index_t window = 0;      ///< sliding window in tokens; 0: whole document
  index_t mlp_hidden = 0;  ///< the block's MLP width; 0: 4 d_model (modded-nanogpt)

  /// n_kv_heads, or its default n_heads / 4 (at least 1).
  constexpr index_t kv_heads() const { return n_kv_heads ? n_kv_heads : (n_heads / 4 > 0 ? n_heads / 4 : 1); }
  /// head_dim, or its default d_model / n_heads.
  constexpr index_t head_dim_for(index_t d_model) const { return head_dim ? head_dim : (n_heads ? d_model / n_heads : 0); }
  /// mlp_hidden, or its default 4 d_model.
  constexpr index_t mlp_width(index_t d_model) const { return mlp_hidden ? mlp_hidden : 4 * d_model; }
};

/// Sizes of a Mamba letter (the state-spaces/mamba reference defaults).
struct MambaSizes {
  index_t d_state = 128;   ///< N: state size per head
  index_t headdim = 64;    ///< P: channels per head
  index_t expand = 2;      ///< d_inner / d_model
  index_t chunk_size = 0;  ///< training scan chunk; 0: the layer's default
  index_t mlp_hidden = 0;  ///< the block's MLP width; 0: 4 d_model
  bool outproj_norm = false;  ///< Mamba-3 only: Mamba3Config::is_outproj_norm (off, as in the reference)
  /// mlp_hidden, or its default 4 d_model.
  constexpr index_t mlp_width(index_t d_model) const { return mlp_hidden ? mlp_hidden : 4 * d_model; }
};

/// Sizes of an M2RNN letter (the reference layer's defaults, docs/m2rnn.md).
struct M2RNNSizes {
  index_t heads = 0;        ///< recurrent heads; 0: max(1, d_model / k_head_dim)
  index_t k_head_dim = 64;  ///< K: rows of each head's matrix state
  index_t v_head_dim = 16;  ///< V: columns of each head's state; W is V x V
  index_t conv_kernel = 4;  ///< causal conv width over [q, k, v]
  index_t mlp_hidden = 0;   ///< the block's MLP width; 0: 4 d_model
  /// mlp_hidden, or its default 4 d_model.
  constexpr index_t mlp_width(index_t d_model) const { return mlp_hidden ? mlp_hidden : 4 * d_model; }
};

namespace detail {
// One block: the mixer built from `config`, then an MLP<ReLU2> of `hidden` units (the draw order
// of every library letter, so a seed fixes the weights).
template <class MixerT, class Config>
Block<MixerT> make_block_with_mlp(const Config& config, index_t d_model, index_t hidden, Rng& rng) {
  using T = typename MixerT::value_type;
  using B = typename MixerT::backend_type;
  MixerT mixer(config, rng);
  return Block<MixerT>(std::move(mixer), MLP<T, B>(d_model, rng, hidden));
}

// A Mamba layer's configuration (Mamba3Config or Mamba2Config) from a letter's sizes; chunk 0
// keeps the layer's own default.
template <class Config>
Config mamba_config(const MambaSizes& s, index_t d_model) {
  Config c;
  c.d_model = d_model;
  c.d_state = s.d_state;
  c.headdim = s.headdim;
  c.expand = s.expand;
  if (s.chunk_size) c.chunk_size = s.chunk_size;
  return c;
}

template <MambaSizes S, Dims D>
constexpr bool validate_mamba_sizes() {
  static_assert(S.d_state > 0 && S.headdim > 0 && S.expand > 0 && S.chunk_size >= 0 && S.mlp_hidden >= 0,
                "megacpp_dims_mamba: d_state, headdim and expand must be positive, chunk_size and mlp_hidden >= 0");
  static_assert((S.expand * D.d_model) % S.headdim == 0,
                "megacpp_dims_mamba_heads: expand * d_model must be divisible by MambaSizes::headdim");
  return true;
}
}  // namespace detail

/// Letter 'A' of the recipe: pre-norm GQA attention (softcap 50, RoPE restarting per document)
/// and an MLP<ReLU2>, sized by S and the model's d_model and max_seq.
template <AttentionSizes S>
struct AttentionLetter {
  /// The block recipe for element type T, backend B and shared sizes D.
  template <class T, class B, Dims D>
  struct factory {
    static_assert(S.n_heads > 0, "megacpp_dims_no_heads: set AttentionSizes::n_heads > 0");
    static_assert(S.head_dim > 0 || D.d_model % S.n_heads == 0,
                  "megacpp_dims_head_split: d_model must be divisible by n_heads, or set AttentionSizes::head_dim");
    static_assert(S.n_heads % S.kv_heads() == 0,
                  "megacpp_dims_gqa: n_heads must be divisible by n_kv_heads (query head h reads kv head h / (n_heads / "
                  "n_kv_heads))");
    static_assert(S.head_dim_for(D.d_model) % 2 == 0, "megacpp_dims_rope: the attention head_dim must be even for RoPE");
    static_assert(S.window >= 0 && S.mlp_hidden >= 0, "megacpp_dims_negative: window and mlp_hidden must be >= 0");

    using type = Block<GQA<T, B>>;  ///< the block this letter builds
    /// The attention configuration derived from S and D.
    static AttentionConfig config() {
      AttentionConfig c;
      c.d_model = D.d_model;
      c.n_heads = S.n_heads;
      c.n_kv_heads = S.kv_heads();
      c.head_dim = S.head_dim_for(D.d_model);
      c.window = S.window;
      c.max_seq = D.max_seq;
      return c;
    }
    /// Builds one block, drawing its initial weights from rng.
    static type make(Rng& rng) {
      return detail::make_block_with_mlp<GQA<T, B>>(config(), D.d_model, S.mlp_width(D.d_model), rng);
    }
    /// "GQA heads 4/1 head_dim 16 window 0 mlp 256".
    static std::string describe() {
      std::ostringstream os;
      os << "GQA heads " << S.n_heads << "/" << S.kv_heads() << " head_dim " << S.head_dim_for(D.d_model) << " window "
         << S.window << " mlp " << S.mlp_width(D.d_model);
      return os.str();
    }
  };
};

/// Letter 'M' of the recipe: pre-norm Mamba-3 (Policy SISO or MIMO<R>, A activation AAct) and an
/// MLP<ReLU2>.
template <MambaSizes S, class Policy = SISO, class AAct = HeavyTailA>
struct Mamba3Letter {
  /// The block recipe for element type T, backend B and shared sizes D.
  template <class T, class B, Dims D>
  struct factory {
    static_assert(detail::validate_mamba_sizes<S, D>());
    using type = Block<Mamba3<T, B, Policy, AAct>>;  ///< the block this letter builds
    /// The Mamba-3 configuration derived from S and D.
    static Mamba3Config config() {
      Mamba3Config c = detail::mamba_config<Mamba3Config>(S, D.d_model);
      c.is_outproj_norm = S.outproj_norm;
      return c;
    }
    /// Builds one block, drawing its initial weights from rng.
    static type make(Rng& rng) {
      return detail::make_block_with_mlp<Mamba3<T, B, Policy, AAct>>(config(), D.d_model, S.mlp_width(D.d_model), rng);
    }
    /// "Mamba3 SISO N16 P32 x2 mlp 256 A heavy-tail". SoftplusA adds no "A ..." so that its id is the
    /// one written before the A rule was a policy: those checkpoints load into a SoftplusA model.
    static std::string describe() {
      std::ostringstream os;
      os << "Mamba3 " << Policy::name;
      if (Policy::rank > 1) os << Policy::rank;
      os << " N" << S.d_state << " P" << S.headdim << " x" << S.expand << " mlp " << S.mlp_width(D.d_model);
      if (S.chunk_size) os << " chunk " << S.chunk_size;
      if (S.outproj_norm) os << " outproj_norm";
      if constexpr (!std::is_same_v<AAct, SoftplusA>) os << " A " << AAct::name;
      return os.str();
    }
  };
};

/// Mamba-2 (SSD with its document-aware conv1d) and an MLP<ReLU2>; not in the recipe's table.
template <MambaSizes S>
struct Mamba2Letter {
  /// The block recipe for element type T, backend B and shared sizes D.
  template <class T, class B, Dims D>
  struct factory {
    static_assert(detail::validate_mamba_sizes<S, D>());
    static_assert(!S.outproj_norm, "megacpp_dims_mamba2_outproj_norm: Mamba-2 always has its gated RMSNorm; "
                                   "MambaSizes::outproj_norm is a Mamba-3 option, leave it false");
    using type = Block<Mamba2<T, B>>;  ///< the block this letter builds
    /// The Mamba-2 configuration derived from S and D.
    static Mamba2Config config() { return detail::mamba_config<Mamba2Config>(S, D.d_model); }
    /// Builds one block, drawing its initial weights from rng.
    static type make(Rng& rng) {
      return detail::make_block_with_mlp<Mamba2<T, B>>(config(), D.d_model, S.mlp_width(D.d_model), rng);
    }
    /// "Mamba2 N16 P32 x2 mlp 256".
    static std::string describe() {
      std::ostringstream os;
      os << "Mamba2 N" << S.d_state << " P" << S.headdim << " x" << S.expand << " mlp " << S.mlp_width(D.d_model);
      if (S.chunk_size) os << " chunk " << S.chunk_size;
      return os.str();
    }
  };
};

/// Letter 'R' of the recipe, the recurrent tail: pre-norm M2RNN (arXiv 2603.14360) and an MLP<ReLU2>.
template <M2RNNSizes S>
struct M2RNNLetter {
  /// The block recipe for element type T, backend B and shared sizes D.
  template <class T, class B, Dims D>
  struct factory {
    static_assert(S.heads >= 0 && S.k_head_dim > 0 && S.v_head_dim > 0 && S.mlp_hidden >= 0 && S.conv_kernel >= 1 &&
                      S.conv_kernel <= kMaxConv1dWidth,
                  "megacpp_dims_m2rnn: M2RNNSizes needs k_head_dim, v_head_dim > 0, heads and mlp_hidden >= 0 (0 = default) "
                  "and conv_kernel in [1, 16] (the causal conv1d's widths)");
    using type = Block<M2RNN<T, B>>;  ///< the block this letter builds
    /// The M2RNN configuration derived from S and D.
    static M2RNNConfig config() {
      M2RNNConfig c;
      c.d_model = D.d_model;
      c.heads = S.heads;
      c.k_head_dim = S.k_head_dim;
      c.v_head_dim = S.v_head_dim;
      c.conv_kernel = S.conv_kernel;
      return c;
    }
    /// Builds one block, drawing its initial weights from rng.
    static type make(Rng& rng) {
      return detail::make_block_with_mlp<M2RNN<T, B>>(config(), D.d_model, S.mlp_width(D.d_model), rng);
    }
    /// "M2RNN heads 4 K16 V16 conv 4 mlp 256".
    static std::string describe() {
      std::ostringstream os;
      os << "M2RNN heads " << config().n_heads() << " K" << S.k_head_dim << " V" << S.v_head_dim << " conv " << S.conv_kernel
         << " mlp " << S.mlp_width(D.d_model);
      return os.str();
    }
  };
};

}  // namespace megacpp
