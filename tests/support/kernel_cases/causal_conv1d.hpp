// Kernel cases of the CausalConv1d contract (megacpp/core/kernels/causal_conv1d.hpp), reached
// through causal_conv1d (megacpp/nn/mamba/conv1d.hpp). No op-level reference exists, so the
// reference is a literal host loop in double, forward and backward:
//
//   y[b, t, c] = bias[c] + sum_{j < K} w[c, j] x[b, t - (K - 1) + j, c]   over taps inside t's document
//   dx[b, t - (K - 1) + j, c] += w[c, j] dy[b, t, c],  dw[c, j] += x[...] dy[b, t, c],  dbias[c] += dy[b, t, c]
//
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <vector>

#include "support/kernel_case.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/nn/mamba/conv1d.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::CausalConv1d> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double";

  // At most K + 1 products per output, summed in float by the kernel and in double here: worst
  // measured (GCC 12, AVX-512) 7.1e-8 in float; in double the sums agree exactly.
  static constexpr Tolerance kTolerance{1e-6, 1e-14};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        // Width 4 (Mamba-2's): the 1-token documents see only their own tap; the 6-token document
        // is longer than the filter, so its later tokens see all four taps.
        {"width 4 with bias; row starting mid-document, 1-token documents, a document longer than the filter",
         [](H& h) { return problem(h, packed_layout<B>({{-2, 1, 1, 6}, {3, 7}}, kBos), 3, 4, true); },
         kTolerance, true},
        {"width 4 without bias, 5 channels",
         [](H& h) { return problem(h, packed_layout<B>({{5, 1, 4}, {-4, 6}}, kBos), 5, 4, false); },
         kTolerance, true},
        {"width 2 with bias, one document per row",
         [](H& h) { return problem(h, packed_layout<B>({{7}, {-7}}, kBos), 4, 2, true); },
         kTolerance, true},
        // Rows of 100 tokens: on CUDA dw and dbias sum the 200 tokens in 7 runs
        // (detail/token_runs.cuh). Too long for finite differences. Measured on the CPU (float, one
        // serial sum): |diff| / (|want| + max |want|) at most 1.9e-7.
        {"width 4 with bias, rows of 100 tokens: dw and dbias summed over runs of tokens",
         [](H& h) { return problem(h, packed_layout<B>({{3, 60, 1, 36}, {-50, 50}}, kBos), 3, 4, true); },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  // inputs: x (batch, seq, channels), weight (channels, width), [bias (channels)].
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, index_t channels, index_t width,
                                     bool with_bias) {
    using V = Var<T, B>;
    const index_t batch = docs.batch, seq = docs.seq;
    std::vector<V> inputs{h.param({batch, seq, channels}), h.param({channels, width})};
    if (with_bias) inputs.push_back(h.param({channels}));
    auto fused = [docs](const std::vector<V>& in) {
      return causal_conv1d(in[0], in[1], in.size() > 2 ? in[2] : V(), docs);
    };
    auto reference = [docs, channels, width](const std::vector<V>& in, Harness<T, B>& hr) {
      const index_t C = channels, K = width;
      const std::vector<double> x = Harness<T, B>::doubles(in[0].value()), w = Harness<T, B>::doubles(in[1].value());
      const std::vector<double> bias = in.size() > 2 ? Harness<T, B>::doubles(in[2].value()) : std::vector<double>(C, 0.0);
      const std::vector<double> dy = Harness<T, B>::doubles(hr.uniform(in[0].shape()));
      std::vector<double> y(x.size()), dx(x.size()), dw(w.size()), dbias(static_cast<std::size_t>(C));
      for (index_t b = 0; b < docs.batch; ++b)
        for (index_t t = 0; t < docs.seq; ++t)
          for (index_t c = 0; c < C; ++c) {
            const index_t out = (b * docs.seq + t) * C + c;
            y[out] = bias[c];
            dbias[c] += dy[out];
            for (index_t j = 0; j < K; ++j) {
              const index_t src = t - (K - 1) + j;
              if (src < 0 || !docs.same_document(b, src, t)) continue;
              const index_t in_at = (b * docs.seq + src) * C + c;
              y[out] += w[c * K + j] * x[in_at];
              dx[in_at] += w[c * K + j] * dy[out];
              dw[c * K + j] += x[in_at] * dy[out];
            }
          }
      Outputs result{y, dx, dw};
      if (in.size() > 2) result.push_back(dbias);
      return result;
    };
    return {std::move(inputs), fused, reference};
  }
};

}  // namespace megacpp::testing
