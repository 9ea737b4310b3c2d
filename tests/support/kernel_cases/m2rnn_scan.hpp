// Kernel cases of the M2RNNScan contract (megacpp/core/kernels/m2rnn_scan.hpp), reached through
// m2rnn_recurrence (megacpp/nn/m2rnn/recurrence.hpp): packed rows of documents, rows starting
// mid-document, 1-token documents, checkpoints that fall inside and across documents, the state
// gradient's clipping. The reference is the recurrence written out again as a host loop in double
// over the whole sequence (forward only: the backward is checked by gradcheck, in double, and
// against the CPU on other backends). The op takes f = sigmoid(x) and W / V (the layer starts W at
// the identity; its rows stay O(1) in sum). Part of tests/support/kernel_cases.hpp.
#pragma once

#include <cmath>
#include <vector>

#include "support/kernel_case.hpp"
#include "support/m2rnn_literal.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/nn/m2rnn/recurrence.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::M2RNNScan> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double over the whole sequence";

  // The recurrence runs in T, the loop in double: each new state is a convex blend of the old one
  // and a tanh, so the error does not grow with the document; a few float ulps of y's scale, as
  // M2RNNStep's cases measure (K up to 64 adds to the readout's sum).
  static constexpr Tolerance kTolerance{1e-5, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"2 heads, K 3, V 4; rows starting mid-document, 1-token documents; checkpoints every 2 tokens",
         [](H& h) { return problem(h, packed_layout<B>({{-3, 5, 1, 1, 4}, {1, 7, 6}}, kBos), {2, 3, 4, 0.0, 2}); },
         kTolerance, true},
        {"1 head, K 5, V 2, one document per row; checkpoints every 5, the last chunk short",
         [](H& h) { return problem(h, packed_layout<B>({{12}, {-12}}, kBos), {1, 5, 2, 0.0, 5}); }, kTolerance, true},
        {"the state gradient clipped to [-0.05, 0.05]; checkpoints every 3",
         [](H& h) { return problem(h, packed_layout<B>({{4, 6}, {-2, 8}}, kBos), {2, 3, 3, 0.05, 3}); }, kTolerance,
         false},
        // More state elements (2 x 130) and columns than a CUDA block has threads.
        {"V 130, 3 heads, K 2", [](H& h) { return problem(h, packed_layout<B>({{3, 2}, {5}}, kBos), {3, 2, 130, 0.0, 4}); },
         kTolerance, false},
        // The layer's default head (K 64, V 16) and checkpoints (64 tokens), across a document start.
        {"K 64, V 16 (the layer's head), chunks of 64 across documents of 70 and 60",
         [](H& h) { return problem(h, packed_layout<B>({{70, 60}}, kBos), {2, 64, 16, 0.0, 64}); }, kTolerance, false},
        // The backward's scratch (4 K V floats) past the 48 KiB a CUDA block's shared memory gets.
        {"K 48, V 72: the backward's scratch in global memory on CUDA",
         [](H& h) { return problem(h, packed_layout<B>({{5}, {-3, 2}}, kBos), {1, 48, 72, 0.0, 2}); }, kTolerance,
         false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  enum Operand { kQ, kK, kV, kF, kW };

  struct Sizes {
    index_t heads, k_dim, v_dim;
    double clip;
    index_t checkpoint_every;
  };

  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, Sizes z) {
    using V = Var<T, B>;
    const index_t bs = docs.batch, t = docs.seq;
    std::vector<V> inputs{h.param({bs, t, z.heads, z.k_dim}), h.param({bs, t, z.heads, z.k_dim}),
                          h.param({bs, t, z.heads, z.v_dim}), h.param({bs, t, z.heads}),
                          h.param({z.heads, z.v_dim, z.v_dim})};
    auto fused = [docs, z](const std::vector<V>& in) {
      return m2rnn_recurrence(in[kQ], in[kK], in[kV], sigmoid(in[kF]), in[kW] * (1.0 / static_cast<double>(z.v_dim)),
                              docs, z.clip, z.checkpoint_every);
    };
    auto literal = [docs, z](const std::vector<V>& in, Harness<T, B>&) {
      return Outputs{literal_recurrence<T, B>(docs, z, in)};
    };
    return {std::move(inputs), fused, literal};
  }

  // The recurrence over the whole sequence, per (row, head), in double, on the op's f and W.
  template <class T, Backend B>
  static std::vector<double> literal_recurrence(const DocumentLayout<B>& docs, const Sizes& z,
                                                const std::vector<Var<T, B>>& in) {
    std::vector<std::vector<double>> x;
    for (const Var<T, B>& v : in) x.push_back(Harness<T, B>::doubles(v.value()));
    for (double& e : x[kF]) e = 1 / (1 + std::exp(-e));
    for (double& e : x[kW]) e /= static_cast<double>(z.v_dim);
    return m2rnn_literal_recurrence(docs, z.heads, z.k_dim, z.v_dim, x);
  }
};

}  // namespace megacpp::testing
