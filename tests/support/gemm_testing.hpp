// tests/support/gemm_testing.hpp: the product shapes the GEMM tests share (fp32 and bf16 entries).
#pragma once

#include <cstddef>

#include "megacpp/core/backend.hpp"

namespace megacpp::testing {

// A product with leading dimensions padded by `pad` beyond the logical width (views into larger
// matrices, as the layers' column slices are).
inline GemmArgs make_args(index_t m, index_t n, index_t k, bool ta, bool tb, index_t pad) {
  GemmArgs g = GemmArgs::dense(ta, tb, m, n, k);
  g.lda += pad;
  g.ldb += pad;
  g.ldc += pad;
  return g;
}
// Elements each operand spans under those leading dimensions.
inline std::size_t a_size(const GemmArgs& g) { return static_cast<std::size_t>((g.trans_a ? g.k : g.m) * g.lda); }
inline std::size_t b_size(const GemmArgs& g) { return static_cast<std::size_t>((g.trans_b ? g.n : g.k) * g.ldb); }
inline std::size_t c_size(const GemmArgs& g) { return static_cast<std::size_t>(g.m * g.ldc); }

}  // namespace megacpp::testing
