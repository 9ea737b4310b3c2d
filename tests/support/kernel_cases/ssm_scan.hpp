// Kernel cases of the SsmScan contract (megacpp/core/kernels/ssm_scan.hpp), reached through
// chunked_scan; the reference is sequential_scan (megacpp/nn/mamba/sequential_scan.hpp), the
// literal recurrence token by token. It is forward-only, so the fused op's gradients are checked
// by finite differences (every case small enough for it) and, on CUDA, against the CPU backend.
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <vector>

#include "support/kernel_case.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/nn/mamba/chunked_scan.hpp"
#include "megacpp/nn/mamba/sequential_scan.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::SsmScan> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "sequential_scan";

  // The chunked form sums each chunk's contributions as matrix products, the recurrence token by
  // token: their roundings differ by a few ulps of the output's scale. Worst measured over these
  // cases (GCC 12, AVX-512): 3.3e-7 in float, 6.0e-16 in double.
  static constexpr Tolerance kTolerance{5e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        // Chunks of 4: the 6- and 7-token documents span two chunks (state carried across a chunk
        // boundary inside a document), row 0 starts mid-document, two 1-token documents.
        {"SISO trapezoid (Mamba-3), heads = groups, chunk 4; row starting mid-document, 1-token documents, "
         "documents longer than a chunk",
         [](H& h) { return problem(h, packed_layout<B>({{-3, 1, 6, 2}, {7, 1, 4}}, kBos), {2, 2, 1, 4, 3, true, true}, 4); },
         kTolerance, true},
        {"MIMO rank 2, groups 1 < heads 2 (Mamba-3), chunk 3",
         [](H& h) { return problem(h, packed_layout<B>({{-2, 5, 1, 3}, {4, 7}}, kBos), {2, 1, 2, 3, 2, true, true}, 3); },
         kTolerance, true},
        {"Mamba-2 (no shift), groups 2 < heads 4, rank 1, chunk 4",
         [](H& h) { return problem(h, packed_layout<B>({{1, 9, 1}, {-5, 6}}, kBos), {4, 2, 1, 3, 2, false, true}, 4); },
         kTolerance, true},
        {"MIMO rank 3, no D, chunk 2 (every document of more than 2 tokens spans chunks)",
         [](H& h) { return problem(h, packed_layout<B>({{3, 1, 5}}, kBos), {2, 2, 3, 2, 2, true, false}, 2); },
         kTolerance, true},
        // Documents and chunks longer than the CPU forward's 32-token pieces, P = 17 (register
        // tiles plus a leftover column).
        {"long documents (40, 70, 39 tokens) in chunks of 64, MIMO rank 2, groups 1 < heads 2, P 17",
         [](H& h) { return problem(h, packed_layout<B>({{1, 40, 70, 39}}, kBos), {2, 1, 2, 8, 17, true, true}, 64); },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  struct Sizes {
    index_t heads, groups, rank, d_state, head_dim;
    bool shift, D;  // operands present
  };

  // Operands in the ranges the layers produce: log_alpha = A dt < 0, gamma and shift in (0, dt).
  // inputs: q, k (batch, seq, groups, R, N), v (batch, seq, heads, R, P), log_alpha, gamma,
  // [shift] (batch, seq, heads), [D] (heads).
  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, Sizes s, index_t chunk) {
    using V = Var<T, B>;
    const index_t batch = docs.batch, seq = docs.seq;
    std::vector<V> inputs{h.param({batch, seq, s.groups, s.rank, s.d_state}),
                          h.param({batch, seq, s.groups, s.rank, s.d_state}),
                          h.param({batch, seq, s.heads, s.rank, s.head_dim}),
                          h.param({batch, seq, s.heads}, -0.9, -0.05),
                          h.param({batch, seq, s.heads}, 0.05, 0.6)};
    if (s.shift) inputs.push_back(h.param({batch, seq, s.heads}, 0.05, 0.6));
    if (s.D) inputs.push_back(h.param({s.heads}));
    auto scan_inputs = [s](const std::vector<V>& in) {
      ScanInputs<T, B> si{in[0], in[1], in[2], in[3], in[4], {}, {}};
      std::size_t next = 5;
      if (s.shift) si.shift = in[next++];
      if (s.D) si.D = in[next++];
      return si;
    };
    auto fused = [docs, chunk, scan_inputs](const std::vector<V>& in) { return chunked_scan(scan_inputs(in), docs, chunk); };
    auto sequential = [docs, scan_inputs](const std::vector<V>& in) { return sequential_scan(scan_inputs(in), docs); };
    return {std::move(inputs), fused, forward_reference<T, B>(sequential)};
  }
};

}  // namespace megacpp::testing
