// megacpp/nn/model/specialists.hpp: the recipe's block letters and specialist model types.
//
// Letter 'A': pre-norm GQA attention block (softcap 50, RoPE, document-masked) + MLP<ReLU2>.
// Letter 'M': pre-norm Mamba-3 (SISO) block + MLP<ReLU2>.
// Sizes (RECIPE.md "Specialist sizes", seed 000): d16 ~400M C++ generator, d24 ~877M, 100M
// CMake specialist; depth dN means N layers of width 64 N (nanochat's convention). `summary()`
// prints the exact parameter counts of each type.
#pragma once

#include "megacpp/nn/attention.hpp"
#include "megacpp/nn/mamba.hpp"
#include "megacpp/nn/model/lm.hpp"

namespace megacpp {

/// Letter 'A': Block<GQA<T, B>> sized by D.
template <class T, class B, Dims D>
struct AttentionLetter {
  using type = Block<GQA<T, B>>;  ///< the block this letter builds
  /// The attention configuration derived from D.
  static AttentionConfig config() {
    AttentionConfig c;
    c.d_model = D.d_model;
    c.n_heads = D.n_heads;
    c.n_kv_heads = D.kv_heads();
    c.head_dim = D.attention_head_dim();
    c.max_seq = D.max_seq;
    return c;
  }
  /// Builds one block, drawing its initial weights from rng.
  static type make(Rng& rng) {
    GQA<T, B> attention(config(), rng);
    return type(std::move(attention), MLP<T, B>(D.d_model, rng, D.mlp_width()));
  }
};

/// Letter 'M': Block<Mamba3<T, B>> (SISO) sized by D.
template <class T, class B, Dims D>
struct Mamba3Letter {
  using type = Block<Mamba3<T, B>>;  ///< the block this letter builds
  /// The Mamba-3 configuration derived from D.
  static Mamba3Config config() {
    Mamba3Config c;
    c.d_model = D.d_model;
    c.d_state = D.mamba_d_state;
    c.headdim = D.mamba_headdim;
    c.expand = D.mamba_expand;
    return c;
  }
  /// Builds one block, drawing its initial weights from rng.
  static type make(Rng& rng) {
    Mamba3<T, B> mixer(config(), rng);
    return type(std::move(mixer), MLP<T, B>(D.d_model, rng, D.mlp_width()));
  }
};

/// The recipe's letter table (E and R have no block type yet: using them fails to compile).
using RecipeLetters = Letters<Letter<'A', AttentionLetter>, Letter<'M', Mamba3Letter>>;

/// A model of the recipe's family: LM with the recipe's letters.
template <class T, Backend B, Dims D, FixedString P>
using RecipeLM = LM<T, B, D, Pattern<P>, RecipeLetters>;

/// Tiny hybrid for tests and the default training run (byte vocabulary padded to 264).
inline constexpr Dims kTinyDims{.d_model = 64, .n_layers = 3, .n_heads = 4, .n_kv_heads = 1, .vocab = 264,
                                .mamba_d_state = 16, .mamba_headdim = 32, .mamba_expand = 2, .max_seq = 4096};
/// 100M CMake specialist (d10, 65,536 vocabulary).
inline constexpr Dims k100MDims{.d_model = 640, .n_layers = 10, .n_heads = 10, .vocab = 65536};
/// 400M C++ generator (d16, 65,536 vocabulary).
inline constexpr Dims k400MDims{.d_model = 1024, .n_layers = 16, .n_heads = 16, .vocab = 65536};
/// ~877M production target (d24, 65,536 vocabulary).
inline constexpr Dims k877MDims{.d_model = 1536, .n_layers = 24, .n_heads = 24, .vocab = 65536};

/// Tiny "AAM" hybrid on kTinyDims (tests, the default training run).
template <class T, Backend B> using TinyLM = RecipeLM<T, B, kTinyDims, "AAM">;
/// 100M CMake specialist, "AAM" on k100MDims.
template <class T, Backend B> using CMake100M = RecipeLM<T, B, k100MDims, "AAM">;
/// 400M C++ generator, "AAM" on k400MDims.
template <class T, Backend B> using Generator400M = RecipeLM<T, B, k400MDims, "AAM">;
/// ~877M production model, "AAM" on k877MDims.
template <class T, Backend B> using Production877M = RecipeLM<T, B, k877MDims, "AAM">;

}  // namespace megacpp
