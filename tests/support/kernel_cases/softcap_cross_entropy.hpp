// Kernel cases of the SoftcapCrossEntropy contract (megacpp/core/kernels/cross_entropy.hpp),
// reached through linear_cross_entropy (megacpp/nn/linear_cross_entropy.hpp); the reference is
// the unfused head made of separate autograd ops:
//
//   loss = cross_entropy(softcap(matmul(h, W^T), cap), targets, mask)
//
// (logits materialised whole, each op with its own gradient-checked backward). Part of
// tests/support/kernel_cases.hpp.
#pragma once

#include <vector>

#include "support/kernel_case.hpp"

#include "megacpp/autograd.hpp"
#include "megacpp/nn/linear_cross_entropy.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::SoftcapCrossEntropy> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "matmul + softcap + cross_entropy";

  // The same GEMMs; the fused row kernel forms softmax and dz in one pass, the reference in
  // separate kernels: they differ by a few ulps of the loss and of dW's scale. Worst measured over
  // these cases (GCC 12, AVX-512): 3.4e-7 in float, 1.0e-15 in double.
  static constexpr Tolerance kTolerance{5e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"softcap 30, loss mask with a half weight, 3 row chunks, vocab 40",
         [](H& h) { return problem(h, 7, 8, 40, {1, 0, 1, 0.5, 1, 1, 0}, {.softcap = 30.0, .chunk_rows = 3}); },
         kTolerance, true},
        // Logits of standard deviation ~1.6 (d 6) against cap 2: tanh is well into its curved part,
        // so the fused kernel's dz factor (1 - (zc / cap)^2) is far from 1.
        {"softcap 2 (saturating), no mask, one chunk, vocab 33",
         [](H& h) { return problem(h, 5, 6, 33, {}, {.softcap = 2.0, .chunk_rows = 1024}); },
         kTolerance, true},
        {"no softcap (0), loss mask, chunks of 1 row",
         [](H& h) { return problem(h, 4, 5, 17, {0, 1, 1, 1}, {.softcap = 0.0, .chunk_rows = 1}); },
         kTolerance, true},
        {"vocab 1000, d 24, softcap 30, 2 chunks of 4 and 3 rows",
         [](H& h) { return problem(h, 7, 24, 1000, {}, {.softcap = 30.0, .chunk_rows = 4}); },
         kTolerance, false},
    };
  }

 private:
  // inputs: h (rows, d) in [-1, 1), W (vocab, d) in [-2, 2); targets drawn after them; mask
  // (rows) as given, or none when empty.
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, index_t rows, index_t d, index_t vocab,
                                     const std::vector<double>& mask_values, LinearCrossEntropyOptions options) {
    using V = Var<T, B>;
    std::vector<V> inputs{h.param({rows, d}), h.param({vocab, d}, -2.0, 2.0)};
    const Tensor<std::int32_t, B> targets = h.ids({rows}, static_cast<std::int32_t>(vocab));
    Tensor<T, B> mask;
    if (!mask_values.empty()) {
      std::vector<T> m(mask_values.begin(), mask_values.end());
      mask = Tensor<T, B>::from_host(Shape{rows}, m);
    }
    auto fused = [targets, mask, options](const std::vector<V>& in) {
      return linear_cross_entropy(in[0], in[1], targets, mask, options);
    };
    auto unfused = [targets, mask, options](const std::vector<V>& in) {
      V logits = matmul(in[0], in[1], false, true);  // (rows, vocab)
      if (options.softcap > 0) logits = softcap(logits, options.softcap);
      return cross_entropy(logits, targets, mask);  // an undefined mask counts every row
    };
    return {std::move(inputs), fused, autograd_reference<T, B>(unfused)};
  }
};

}  // namespace megacpp::testing
