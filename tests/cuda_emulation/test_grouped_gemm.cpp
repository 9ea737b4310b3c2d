// tests/cuda_emulation/test_grouped_gemm.cpp: the CUDA backend's one-launch grouped products on
// bf16 operands (detail/grouped_gemm.cuh: forward, dX and dW, each one grid of 64 x 64 tensor-core
// tiles over every group) on the emulator against GroupedGemm<Cpu> on the same bf16 operands: groups
// that are empty, of one row, of several row tiles and of a whole tile; K and N that leave partial
// steps and partial column tiles; gradients added into non-zero values, each alone. Both sum exact
// bf16 products in fp32, in different orders. Also: the tiles each product launches, the grid's
// order (the groups with the most rows first), which shapes the one-launch products take, the
// document-masking invariant (a row of X changes only its own row of Y and its own group's dW,
// bitwise), and the same bits under the reversed and greedy schedules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "grouped_gemm_emulated.hpp"
#include "host_arrays.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu.hpp"
#include "megacpp/backends/cpu/kernels.hpp"

namespace megacpp::cuda_emulation {
namespace {

struct GroupedCase {
  const char* name;
  std::vector<index_t> offsets;
  index_t k, n;
  bool dx = true, dw = true;
  index_t forward_blocks, dx_blocks, dw_blocks;  // the tiles each product launches
};

const std::vector<GroupedCase>& grouped_cases() {
  static const std::vector<GroupedCase> all{
      {"groups of 0, 1, 130, 64 and 7 rows, K 80, N 96", {0, 0, 1, 131, 195, 202}, 80, 96, true, true, 12, 12, 16},
      {"groups of 200, 0 and 57 rows, K 64, N 136, dX only", {0, 200, 200, 257}, 64, 136, true, false, 15, 5, 6},
      {"groups of 33 and 0 rows, K 104, N 48, dW only", {0, 33, 33}, 104, 48, false, true, 1, 2, 2},
      {"one group of 8 rows, K 8, N 8", {0, 8}, 8, 8, true, true, 1, 1, 1},
      {"every group empty", {0, 0, 0}, 16, 16, true, true, 0, 0, 0},
  };
  return all;
}

struct GroupedRun {
  std::vector<float> y, dx, dw;
  std::vector<std::vector<float>> outputs() const { return {y, dx, dw}; }
};

struct Operands {
  std::vector<bf16> x, w, dy;
  explicit Operands(const GroupedCase& c) {
    Rng rng(61);
    const auto rows = static_cast<std::size_t>(c.offsets.back()), groups = c.offsets.size() - 1;
    const auto k = static_cast<std::size_t>(c.k), n = static_cast<std::size_t>(c.n);
    x = uniform<bf16>(rows * k, rng);
    w = uniform<bf16>(groups * n * k, rng);
    dy = uniform<bf16>(rows * n, rng);
  }
};

template <class Kernel>
GroupedRun run_grouped(const GroupedCase& c, const Operands& o) {
  const index_t groups = static_cast<index_t>(c.offsets.size()) - 1, rows = c.offsets.back();
  Rng rng(67);
  GroupedRun r{uninitialized_device<float>(rows * c.n), uniform<float>(static_cast<std::size_t>(rows * c.k), rng),
               uniform<float>(static_cast<std::size_t>(groups * c.n * c.k), rng)};
  const kernels::GroupedGemmParams p{groups, c.k, c.n, c.offsets.data()};
  const kernels::GroupedGemmArgs<float, bf16> a{o.x.data(), o.w.data(), r.y.data()};
  Kernel::forward(p, a);
  Kernel::backward(p, a, {o.dy.data(), c.dx ? r.dx.data() : nullptr, c.dw ? r.dw.data() : nullptr});
  return r;
}

struct CpuGroupedGemm {
  static void forward(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a) {
    kernels::GroupedGemm<Cpu>::forward<float, bf16>(p, a);
  }
  static void backward(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a,
                       const kernels::GroupedGemmGrads<float, bf16>& d) {
    kernels::GroupedGemm<Cpu>::backward<float, bf16>(p, a, d);
  }
};

void check_close(const char* what, const char* name, const std::vector<float>& got, const std::vector<float>& want) {
  const double error = scaled_error(got, want);
  std::printf("  grouped bf16 %-3s error %.2e  (%s)\n", what, error, name);
  INFO(name << ", " << what << ": error " << error);
  // Sums of up to 200 exact bf16 products of size <= 1 in fp32, in two orders (measured <= 1.7e-7).
  CHECK(error <= 1e-6);
}

}  // namespace

TEST_CASE("grouped: the one-launch bf16 products on the emulator match GroupedGemm<Cpu>", "[grouped]") {
  for (const GroupedCase& c : grouped_cases()) {
    const Operands o(c);
    const GroupedRun got = run_grouped<EmulatedGroupedGemm>(c, o), want = run_grouped<CpuGroupedGemm>(c, o);
    check_close("y", c.name, got.y, want.y);
    check_close("dx", c.name, got.dx, want.dx);
    check_close("dw", c.name, got.dw, want.dw);
  }
}

TEST_CASE("grouped: each product launches a block per output tile of every group", "[grouped]") {
  for (const GroupedCase& c : grouped_cases()) {
    INFO(c.name);
    const kernels::GroupedGemmParams p{static_cast<index_t>(c.offsets.size()) - 1, c.k, c.n, c.offsets.data()};
    CHECK(grouped_product_blocks(0, p) == c.forward_blocks);
    CHECK(grouped_product_blocks(1, p) == c.dx_blocks);
    CHECK(grouped_product_blocks(2, p) == c.dw_blocks);
  }
}

TEST_CASE("grouped: the shapes the one-launch products take", "[grouped]") {
  alignas(16) static const bf16 operand[16] = {};
  alignas(16) static float out[4] = {};
  const std::vector<index_t> eight{0, 10, 20, 30, 40, 50, 60, 70, 80}, huge{0, index_t{1} << 31};
  std::vector<index_t> many(258);
  for (std::size_t g = 0; g < many.size(); ++g) many[g] = static_cast<index_t>(g);
  const auto fits = [&](index_t groups, const std::vector<index_t>& offsets, index_t n, index_t k, const bf16* x,
                        const float* y) {
    return grouped_product_fits({groups, k, n, offsets.data()}, x, operand, operand, out, y);
  };
  CHECK(fits(8, eight, 512, 256, operand, out));
  CHECK(fits(256, many, 8, 8, operand, out));
  CHECK_FALSE(fits(257, many, 8, 8, operand, out));        // GroupTiles holds 256
  CHECK_FALSE(fits(1, huge, 8, 8, operand, out));          // rows past int32
  CHECK_FALSE(fits(8, eight, 70, 256, operand, out));      // N not whole chunks
  CHECK_FALSE(fits(8, eight, 512, 44, operand, out));      // K not whole chunks
  CHECK_FALSE(fits(8, eight, 512, 256, operand + 1, out));  // an operand not 16-byte aligned
  CHECK_FALSE(fits(8, eight, 512, 256, operand, out + 1));  // a second output (dW) not 8-byte aligned
}

TEST_CASE("grouped: the grid takes the groups with the most rows first", "[grouped]") {
  const GroupedCase& c = grouped_cases()[0];  // rows 0, 1, 130, 64, 7
  const kernels::GroupedGemmParams p{static_cast<index_t>(c.offsets.size()) - 1, c.k, c.n, c.offsets.data()};
  CHECK(grouped_product_slots(p) == std::vector<index_t>{2, 3, 4, 1, 0});
}

TEST_CASE("grouped: a row of X changes only its own row of Y and its own group's dW, bitwise", "[grouped]") {
  const GroupedCase& c = grouped_cases()[0];
  const Operands o(c);
  Operands perturbed = o;
  const index_t k = c.k, row = 140;  // in the group of rows [131, 195): group 3
  for (index_t i = 0; i < k; ++i) perturbed.x[static_cast<std::size_t>(row * k + i)] = bf16(0.75f);
  const GroupedRun base = run_grouped<EmulatedGroupedGemm>(c, o), moved = run_grouped<EmulatedGroupedGemm>(c, perturbed);
  const auto n = static_cast<std::size_t>(c.n), nk = static_cast<std::size_t>(c.n * c.k);
  for (std::size_t r = 0; r < base.y.size() / n; ++r) {
    const bool same = std::equal(base.y.begin() + r * n, base.y.begin() + (r + 1) * n, moved.y.begin() + r * n);
    if (static_cast<index_t>(r) == row) CHECK_FALSE(same);
    else if (!same) FAIL("row " << r << " of Y changed with row " << row << " of X");
  }
  for (std::size_t g = 0; g + 1 < c.offsets.size(); ++g) {
    const bool same = std::equal(base.dw.begin() + g * nk, base.dw.begin() + (g + 1) * nk, moved.dw.begin() + g * nk);
    CHECK(same == (g != 3));
  }
  CHECK(same_bits(base.dx, moved.dx));  // dX reads dY and W only
}

TEST_CASE("grouped: the same bits run to run and under reversed and greedy schedules", "[grouped]") {
  for (const GroupedCase& c : grouped_cases()) {
    INFO(c.name);
    const Operands o(c);
    check_same_bits_under_schedules([&] { return run_grouped<EmulatedGroupedGemm>(c, o).outputs(); });
  }
}

}  // namespace megacpp::cuda_emulation
