// megacpp/nn/model/specialists.hpp: the recipe's letter table and its specialist model types.
//
// Letter 'A': pre-norm GQA attention block (softcap 50, RoPE, document-masked) + MLP<ReLU2>.
// Letter 'M': pre-norm Mamba-3 (SISO; MIMO<R> in RecipeMIMOLetters) block + MLP<ReLU2>.
// Sizes: d16 ~400M C++ generator, d24 ~877M production target, d10 100M CMake specialist;
// depth dN means N layers of width 64 N (nanochat's convention). `summary()` prints the exact
// parameter counts of each type.
#pragma once

#include "megacpp/nn/model/letters.hpp"
#include "megacpp/nn/model/lm.hpp"

namespace megacpp {

/// The recipe's letter table: 'A' attention and 'M' Mamba-3, each with its own sizes.
template <AttentionSizes A, MambaSizes M = MambaSizes{}>
using RecipeLetters = Letters<Letter<'A', AttentionLetter<A>>, Letter<'M', Mamba3Letter<M>>>;

/// A model of the recipe's family: LM with the recipe's letters.
template <class T, Backend B, Dims D, FixedString P, AttentionSizes A, MambaSizes M = MambaSizes{}>
using RecipeLM = LM<T, B, D, Pattern<P>, RecipeLetters<A, M>>;

/// The recipe's letter table with 'M' building Mamba-3 MIMO<R> (the paper's rank 4 by default)
/// instead of SISO; 'A' as in RecipeLetters.
template <AttentionSizes A, MambaSizes M = MambaSizes{}, index_t R = 4>
using RecipeMIMOLetters = Letters<Letter<'A', AttentionLetter<A>>, Letter<'M', Mamba3Letter<M, MIMO<R>>>>;

/// A model of the recipe's family whose 'M' layers are Mamba-3 MIMO<R>.
template <class T, Backend B, Dims D, FixedString P, AttentionSizes A, MambaSizes M = MambaSizes{}, index_t R = 4>
using RecipeMIMOLM = LM<T, B, D, Pattern<P>, RecipeMIMOLetters<A, M, R>>;

/// Tiny hybrid for tests and the default training run (byte vocabulary padded to 264).
inline constexpr Dims kTinyDims{.d_model = 64, .n_layers = 3, .vocab = 264, .max_seq = 4096};
/// The tiny model's attention: 4 query heads over 1 kv head of 16.
inline constexpr AttentionSizes kTinyAttention{.n_heads = 4, .n_kv_heads = 1};
/// The tiny model's Mamba-3: d_inner 128 in 4 heads of 32, N = 16.
inline constexpr MambaSizes kTinyMamba{.d_state = 16, .headdim = 32, .expand = 2};

/// 100M CMake specialist (d10, 65,536 vocabulary).
inline constexpr Dims k100MDims{.d_model = 640, .n_layers = 10, .vocab = 65536};
/// 400M C++ generator (d16, 65,536 vocabulary).
inline constexpr Dims k400MDims{.d_model = 1024, .n_layers = 16, .vocab = 65536};
/// ~877M production target (d24, 65,536 vocabulary).
inline constexpr Dims k877MDims{.d_model = 1536, .n_layers = 24, .vocab = 65536};

/// Tiny "AAM" hybrid (tests, the default training run).
template <class T, Backend B> using TinyLM = RecipeLM<T, B, kTinyDims, "AAM", kTinyAttention, kTinyMamba>;
/// 100M CMake specialist, "AAM": 10 heads (2 kv heads), reference Mamba-3 sizes.
template <class T, Backend B> using CMake100M = RecipeLM<T, B, k100MDims, "AAM", AttentionSizes{.n_heads = 10}>;
/// 400M C++ generator, "AAM": 16 heads (4 kv heads), reference Mamba-3 sizes.
template <class T, Backend B> using Generator400M = RecipeLM<T, B, k400MDims, "AAM", AttentionSizes{.n_heads = 16}>;
/// ~877M production model, "AAM": 24 heads (6 kv heads), reference Mamba-3 sizes.
template <class T, Backend B> using Production877M = RecipeLM<T, B, k877MDims, "AAM", AttentionSizes{.n_heads = 24}>;

}  // namespace megacpp
