// tests/support/gemm_testing.hpp: the product shapes and the row-independence check the GEMM
// tests share (fp32 and bf16 entries).
#pragma once

#include <catch2/catch.hpp>

#include <omp.h>

#include <cstddef>
#include <cstring>
#include <vector>

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

// The whole-layer masking invariant (a document gives the same bits packed or alone) needs exactly
// this of every projection: a row of C depends only on its row of op(A), bitwise. The product of
// g (dense C) on all rows, on a sub-range starting at an odd row, and one row at a time, on 1 and
// 2 threads, must give the same bits. product(part, a_offset, c) computes the rows of `part`
// (g with fewer rows) from op(A) starting at element a_offset of A, into c.
template <class Product>
void require_rows_independent(const GemmArgs& g, Product product) {
  auto rows_of = [&](index_t first, index_t count, int threads) {
    omp_set_num_threads(threads);
    GemmArgs part = g;
    part.m = count;
    part.ldc = g.n;
    std::vector<float> c(static_cast<std::size_t>(count * g.n));
    product(part, g.trans_a ? first : first * g.lda, c.data());
    omp_set_num_threads(2);
    return c;
  };
  const auto all_two = rows_of(0, g.m, 2), all_one = rows_of(0, g.m, 1);
  REQUIRE(std::memcmp(all_two.data(), all_one.data(), all_two.size() * sizeof(float)) == 0);
  const index_t first = 37, count = 101;
  const auto part = rows_of(first, count, 2);
  REQUIRE(std::memcmp(part.data(), all_two.data() + first * g.n, part.size() * sizeof(float)) == 0);
  for (index_t i : {index_t{0}, index_t{5}, index_t{97}, g.m - 1}) {
    const auto row = rows_of(i, 1, 2);
    REQUIRE(std::memcmp(row.data(), all_two.data() + i * g.n, row.size() * sizeof(float)) == 0);
  }
}

}  // namespace megacpp::testing
