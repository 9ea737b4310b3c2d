// megacpp/nn/model/specialists.hpp: the recipe's letter table and its specialist model types.
//
// Letter 'A': pre-norm GQA attention block (softcap 50, RoPE, document-masked) + MLP<ReLU2>.
// Letter 'M': pre-norm Mamba-3 (SISO; MIMO<R> in RecipeMIMOLetters) block + MLP<ReLU2>.
// Letter 'R': pre-norm M2RNN block + MLP<ReLU2> (the recurrent tail, docs/m2rnn.md).
// Letter 'E' (RecipeMoELetters): pre-norm MoE feed-forward, no mixer (docs/moe.md).
// Sizes: d16 ~400M C++ generator, d24 ~877M production target, d10 100M CMake specialist;
// depth dN means N layers of width 64 N (nanochat's convention). `summary()` prints the exact
// parameter counts of each type.
#pragma once

#include "megacpp/nn/model/letters.hpp"
#include "megacpp/nn/model/lm.hpp"
#include "megacpp/nn/model/moe_letter.hpp"

namespace megacpp {

/// The recipe's letter table: 'A' attention, 'M' Mamba-3 and 'R' M2RNN, each with its own sizes.
template <AttentionSizes A, MambaSizes M = MambaSizes{}, M2RNNSizes R = M2RNNSizes{}>
using RecipeLetters = Letters<Letter<'A', AttentionLetter<A>>, Letter<'M', Mamba3Letter<M>>, Letter<'R', M2RNNLetter<R>>>;

/// A model of the recipe's family: LM with the recipe's letters.
template <class T, Backend B, Dims D, FixedString P, AttentionSizes A, MambaSizes M = MambaSizes{}, M2RNNSizes R = M2RNNSizes{}>
using RecipeLM = LM<T, B, D, Pattern<P>, RecipeLetters<A, M, R>>;

/// The recipe's whole letter table: 'E' = MoELetter<E, Routing> beside 'A', 'M' and 'R'.
template <AttentionSizes A, MambaSizes M, MoESizes E, class Routing = SoftmaxTopK, M2RNNSizes R = M2RNNSizes{}>
using RecipeMoELetters = Letters<Letter<'A', AttentionLetter<A>>, Letter<'M', Mamba3Letter<M>>,
                                 Letter<'E', MoELetter<E, Routing>>, Letter<'R', M2RNNLetter<R>>>;

/// A model of the recipe's family with MoE layers ('E').
template <class T, Backend B, Dims D, FixedString P, AttentionSizes A, MambaSizes M, MoESizes E, class Routing = SoftmaxTopK,
          M2RNNSizes R = M2RNNSizes{}>
using RecipeMoELM = LM<T, B, D, Pattern<P>, RecipeMoELetters<A, M, E, Routing, R>>;

/// A model of the recipe's family with multi-token prediction of depth 1 (nn/model/mtp.hpp).
template <class T, Backend B, Dims D, FixedString P, AttentionSizes A, MambaSizes M = MambaSizes{}>
using RecipeMtpLM = LM<T, B, D, Pattern<P>, RecipeLetters<A, M>, HeadSoftcap<30>, MtpDepth1<'A'>>;

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

/// The tiny MoE layer: 4 experts of 128 (4 d_model / top_k), top-2.
inline constexpr MoESizes kTinyMoE{.experts = 4, .top_k = 2};

/// 100M CMake specialist (d10, 65,536 vocabulary).
inline constexpr Dims k100MDims{.d_model = 640, .n_layers = 10, .vocab = 65536};
/// 400M C++ generator (d16, 65,536 vocabulary).
inline constexpr Dims k400MDims{.d_model = 1024, .n_layers = 16, .vocab = 65536};
/// ~877M production target (d24, 65,536 vocabulary).
inline constexpr Dims k877MDims{.d_model = 1536, .n_layers = 24, .vocab = 65536};

/// Tiny "AAM" hybrid (tests, the default training run).
template <class T, Backend B> using TinyLM = RecipeLM<T, B, kTinyDims, "AAM", kTinyAttention, kTinyMamba>;
/// The tiny hybrid with multi-token prediction of depth 1 (its block: the 'A' letter's).
template <class T, Backend B> using TinyMtpLM = RecipeMtpLM<T, B, kTinyDims, "AAM", kTinyAttention, kTinyMamba>;
/// Tiny "AEM" MoE hybrid (tests, bench/train_step): attention, an MoE layer, Mamba-3.
template <class T, Backend B> using TinyMoELM = RecipeMoELM<T, B, kTinyDims, "AEM", kTinyAttention, kTinyMamba, kTinyMoE>;
/// The tiny M2RNN: 4 heads of 16 x 16 matrix states.
inline constexpr M2RNNSizes kTinyM2RNN{.k_head_dim = 16, .v_head_dim = 16};

/// NAM56R's layer layout: 56 layers with the letter counts of the recipe's 4.73B backbone, 13
/// attention ('A'), 27 Mamba-3 ('M') and 12 MoE ('E') layers, the other 4 the recurrent tail ('R')
/// closing each quarter. The backbone's published motif "AEMEAEMEAEMR" has more MoE than Mamba
/// layers, so repeating it cannot give these counts; each quarter here keeps its shape (attention
/// then an MoE layer, Mamba runs between, the tail last) with the counts' proportions: three
/// quarters "AEMMAMEMMAMEMR" (A3 E3 M7 R1) and a last "AEMMAMEMMAAEMR" (A4 E3 M6 R1).
inline constexpr FixedString kNam56rPattern{"AEMMAMEMMAMEMR" "AEMMAMEMMAMEMR" "AEMMAMEMMAMEMR" "AEMMAMEMMAAEMR"};
/// NAM56R's layout at the tiny model's width (d_model 64, byte vocabulary): runs on a laptop.
inline constexpr Dims kNam56rTinyDims{.d_model = 64, .n_layers = 56, .vocab = 264, .max_seq = 4096};
/// NAM56R-shaped hybrid at tiny width: the tiny letters' sizes, MoE of 4 experts top-2 (softmax
/// routing with the Switch balance loss), M2RNN of 4 heads.
template <class T, Backend B>
using Nam56rTinyLM = RecipeMoELM<T, B, kNam56rTinyDims, kNam56rPattern, kTinyAttention, kTinyMamba, kTinyMoE, SoftmaxTopK, kTinyM2RNN>;

/// 100M CMake specialist, "AAM": 10 heads (2 kv heads), reference Mamba-3 sizes.
template <class T, Backend B> using CMake100M = RecipeLM<T, B, k100MDims, "AAM", AttentionSizes{.n_heads = 10}>;
/// 400M C++ generator, "AAM": 16 heads (4 kv heads), reference Mamba-3 sizes.
template <class T, Backend B> using Generator400M = RecipeLM<T, B, k400MDims, "AAM", AttentionSizes{.n_heads = 16}>;
/// ~877M production model, "AAM": 24 heads (6 kv heads), reference Mamba-3 sizes.
template <class T, Backend B> using Production877M = RecipeLM<T, B, k877MDims, "AAM", AttentionSizes{.n_heads = 24}>;

}  // namespace megacpp
