// Kernel cases of the M2RNNStep contract (megacpp/core/kernels/m2rnn_step.hpp): packed rows of
// documents decoded token by token through kernels::M2RNNStep<B>::step, each row's state zeroed at
// its document starts, against a literal host loop in double over the whole sequence (the
// recurrence of the contract's comment written out again: A = H W + k v^T, the blend through
// tanh, the readout). Forward only (decoding has no backward), so no gradcheck.
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/decode_steps.hpp"
#include "support/kernel_case.hpp"
#include "support/m2rnn_literal.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/core/kernels/m2rnn_step.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::M2RNNStep> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double over the whole sequence";

  // The step runs in T, the loop in double: a few float ulps of y's scale (each new state is a
  // convex blend of the old one and a tanh, so nothing grows with the document). Worst measured
  // over these cases (GCC 12, -march=native on an AMD Zen 3: AVX2 and FMA): between 2e-7 and 4e-7
  // in float (the V 130 case), within 1e-16 in double; the bounds leave ~10x and ~100x of room.
  static constexpr Tolerance kTolerance{3e-6, 1e-14};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"2 heads, K 3, V 4; a row starting mid-document, 1-token documents",
         [](H& h) { return problem(h, packed_layout<B>({{-3, 5, 1, 1, 4}, {1, 7, 6}}, kBos), 2, 3, 4); }, kTolerance, false},
        {"1 head, K 8, V 2, one long document per row",
         [](H& h) { return problem(h, packed_layout<B>({{12}, {-12}}, kBos), 1, 8, 2); }, kTolerance, false},
        // More columns than a CUDA block has threads (130 > 128), grid-stride over 2 x 3 pairs.
        {"V 130, 3 heads, K 2", [](H& h) { return problem(h, packed_layout<B>({{3, 2}, {5}}, kBos), 3, 2, 130); },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  // The operands, in the order of `inputs`: q, k (batch, seq, heads, K); v (batch, seq, heads, V);
  // f (batch, seq, heads); W (heads, V, V). Drawn uniform in [-1, 1); the ops use f = (x + 1) / 2
  // (a gate in (0, 1)) and W / V (the layer starts W at the identity; its rows stay O(1) in sum).
  enum Operand { kQ, kK, kV, kF, kW };

  struct Sizes {
    index_t batch, seq, heads, k_dim, v_dim;
  };

  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, index_t heads, index_t k_dim,
                                     index_t v_dim) {
    using V = Var<T, B>;
    const Sizes z{docs.batch, docs.seq, heads, k_dim, v_dim};
    const index_t bs = z.batch, t = z.seq;
    std::vector<V> inputs{h.param({bs, t, heads, k_dim}), h.param({bs, t, heads, k_dim}), h.param({bs, t, heads, v_dim}),
                          h.param({bs, t, heads}), h.param({heads, v_dim, v_dim})};
    auto decoded = [docs, z](const std::vector<V>& in) { return decode_all<T, B>(docs, z, in); };
    auto literal = [docs, z](const std::vector<V>& in, Harness<T, B>&) {
      NoGrad no_grad;
      return Outputs{literal_recurrence(docs, z, in)};
    };
    return {std::move(inputs), decoded, literal};
  }

  template <class T, Backend B>
  static std::vector<std::vector<double>> host_operands(const std::vector<Var<T, B>>& in, const Sizes& z) {
    std::vector<std::vector<double>> x;
    for (const Var<T, B>& v : in) x.push_back(Harness<T, B>::doubles(v.value()));
    for (double& e : x[kF]) e = static_cast<double>(static_cast<T>((e + 1) / 2));
    for (double& e : x[kW]) e = static_cast<double>(static_cast<T>(e / static_cast<double>(z.v_dim)));
    return x;
  }

  // Decodes every row token by token: y (batch, seq, heads, V).
  template <class T, Backend B>
  static Var<T, B> decode_all(const DocumentLayout<B>& docs, const Sizes& z, const std::vector<Var<T, B>>& in) {
    const std::vector<std::vector<double>> x = host_operands<T, B>(in, z);
    const index_t Hh = z.heads, K = z.k_dim, Vd = z.v_dim;
    const kernels::M2RNNStepParams p{z.batch, Hh, K, Vd};
    p.validate("decode_all");
    Tensor<T, B> state = Tensor<T, B>::zeros({z.batch, Hh, K, Vd});
    const auto token = [&](Operand o, index_t t, index_t width) { return token_slice(x[o], z.batch, z.seq, t, width); };
    const Tensor<T, B> W = on_backend<T, B>(x[kW], {Hh, Vd, Vd});
    std::vector<T> y(static_cast<std::size_t>(z.batch * z.seq * Hh * Vd));
    for (index_t t = 0; t < z.seq; ++t) {
      for (index_t b = 0; b < z.batch; ++b)
        if (starts_document_at(docs.spans[static_cast<std::size_t>(b)], t)) {
          Tensor<T, B> row = state.rows(b, b + 1);
          row.fill(T(0));
        }
      const Tensor<T, B> q = on_backend<T, B>(token(kQ, t, Hh * K), {z.batch, Hh, K}),
                         k = on_backend<T, B>(token(kK, t, Hh * K), {z.batch, Hh, K}),
                         v = on_backend<T, B>(token(kV, t, Hh * Vd), {z.batch, Hh, Vd}),
                         f = on_backend<T, B>(token(kF, t, Hh), {z.batch, Hh});
      Tensor<T, B> yt({z.batch, Hh, Vd});
      const kernels::M2RNNStepArgs<T> a{q.data(), k.data(), v.data(), f.data(), W.data(), state.data(), yt.data()};
      kernels::M2RNNStep<B>::step(p, a);
      const std::vector<T> yh = yt.to_host();
      for (index_t b = 0; b < z.batch; ++b)
        std::copy_n(yh.begin() + b * Hh * Vd, Hh * Vd, y.begin() + (b * z.seq + t) * Hh * Vd);
    }
    return Var<T, B>(Tensor<T, B>::from_host({z.batch, z.seq, Hh, Vd}, y));
  }

  // The recurrence over the whole sequence, per (row, head), in double.
  template <class T, Backend B>
  static std::vector<double> literal_recurrence(const DocumentLayout<B>& docs, const Sizes& z,
                                                const std::vector<Var<T, B>>& in) {
    return m2rnn_literal_recurrence(docs, z.heads, z.k_dim, z.v_dim, host_operands<T, B>(in, z));
  }
};

}  // namespace megacpp::testing
