// tests/cuda_emulation/test_indexing.cpp: the CUDA backend's index-driven kernels
// (detail/indexing.cuh: gathers, the embedding's scatter-add, RoPE, cross-entropy forward and
// backward, the LM head's fused softcap + cross-entropy rows) and the MoE gated combine
// (detail/gated_combine.cuh) on the emulator against the CPU backend's (cpu/detail/indexing.hpp,
// cpu/detail/gated_combine.hpp), in float and double. Gathers and the scatter-add are the CPU's bits
// (repeated ids accumulate in row order on both); the rest agree to rounding. Also the same bits
// under the reversed and greedy schedules, and the fused head's barrier between its loss and its
// in-place gradient shown needed: without it, threads that own targets' columns overwrite those
// logits before thread 0 reads them for the loss.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "device_lines.hpp"
#include "emulator/options.hpp"
#include "host_arrays.hpp"
#include "indexing_emulated.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu.hpp"
#include "megacpp/backends/cpu/kernels.hpp"

namespace megacpp::cuda_emulation {
namespace {

// The CPU backend's calls and the emulated CUDA ones, under the same names.
struct CpuKernels {
  using Indexing = Cpu;
  using Head = kernels::SoftcapCrossEntropy<Cpu>;
  using Combine = kernels::GatedCombine<Cpu>;
};
struct EmulatedKernels {
  using Indexing = EmulatedIndexing;
  using Head = EmulatedSoftcapCrossEntropy;
  using Combine = EmulatedGatedCombine;
};

// Outputs that agree to rounding: the CPU's packet exp/log/tanh against the host's scalar ones, its
// lane sums against the block's tree, and multiply-adds the compiler may fuse differently.
template <class T>
double tolerance_for(double float_tolerance) {
  return std::is_same_v<T, float> ? float_tolerance : 2e-15;
}

template <class T>
void check_close(const char* what, const std::string& name, const std::vector<T>& got, const std::vector<T>& want,
                 double tolerance) {
  const double error = scaled_error(got, want);
  std::printf("  indexing %s %-14s error %.2e  (%s)\n", std::is_same_v<T, float> ? "float " : "double", what, error,
              name.c_str());
  INFO(name << ", " << what << ": error " << error << " against " << tolerance);
  CHECK(error <= tolerance);
}

std::vector<std::int32_t> ids_below(std::size_t n, index_t bound, Rng& rng) {
  std::vector<std::int32_t> ids(n);
  for (std::int32_t& id : ids) id = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(bound)));
  return ids;
}

// ---- gathers and the embedding's scatter-add ---------------------------------------------------

struct TableCase {
  const char* name;
  index_t n, dim, vocab;
  bool descending;  // ids n - 1 .. 0 mod vocab: every run's rows in reverse order of the ids' first rows
};

const std::vector<TableCase>& table_cases() {
  static const std::vector<TableCase> all{
      {"5 rows of 3 from 4 ids", 5, 3, 4, false},
      {"300 rows of 129 (two column strides of 128) from 17 ids", 300, 129, 17, false},
      {"64 rows of 1, one id", 64, 1, 1, false},
      {"200 rows of 40 from 7 ids, descending", 200, 40, 7, true},
      {"no rows", 0, 8, 3, false},
  };
  return all;
}

template <class T>
struct TableRun {
  std::vector<T> gathered, gtable;
  std::vector<std::vector<T>> outputs() const { return {gathered, gtable}; }
};

template <class T, class K>
TableRun<T> run_table(const TableCase& c) {
  Rng rng(51);
  const auto rows = static_cast<std::size_t>(c.n), width = static_cast<std::size_t>(c.dim);
  std::vector<std::int32_t> idx = ids_below(rows, c.vocab, rng);
  if (c.descending)
    for (std::size_t r = 0; r < rows; ++r) idx[r] = static_cast<std::int32_t>((rows - 1 - r) % static_cast<std::size_t>(c.vocab));
  const std::vector<T> table = uniform<T>(static_cast<std::size_t>(c.vocab) * width, rng), gout = uniform<T>(rows * width, rng);
  TableRun<T> r{uninitialized_device<T>(c.n * c.dim), uniform<T>(static_cast<std::size_t>(c.vocab) * width, rng)};
  K::Indexing::template gather_rows<T>(c.n, c.dim, table.data(), idx.data(), r.gathered.data());
  K::Indexing::template scatter_add_rows<T>(c.n, c.dim, gout.data(), idx.data(), r.gtable.data());
  return r;
}

template <class T>
void check_tables_against_cpu() {
  for (const TableCase& c : table_cases()) {
    INFO(c.name);
    const TableRun<T> got = run_table<T, EmulatedKernels>(c), want = run_table<T, CpuKernels>(c);
    CHECK(same_bits(got.gathered, want.gathered));
    CHECK(same_bits(got.gtable, want.gtable));
  }
}

// ---- RoPE --------------------------------------------------------------------------------------

struct RopeCase {
  const char* name;
  index_t tokens, heads, dim;
  enum Positions { restarting, distinct, far } positions;
  int sign;
  double beta;
  bool in_place;
};

const std::vector<RopeCase>& rope_cases() {
  static const std::vector<RopeCase> all{
      {"(16, 5, 16): documents restarting at 0 (the CPU's table of positions), beta 0 over NaN", 16, 5, 16,
       RopeCase::restarting, 1, 0.0, false},
      {"(9, 8, 64): distinct positions, sign -1 (the backward), beta 1", 9, 8, 64, RopeCase::distinct, -1, 1.0, false},
      {"(7, 3, 130): positions near 60,000, beta 0.5", 7, 3, 130, RopeCase::far, 1, 0.5, false},
      {"(12, 4, 32): in place", 12, 4, 32, RopeCase::restarting, 1, 0.0, true},
      {"(5, 1, 2): one pair per head", 5, 1, 2, RopeCase::distinct, -1, 0.0, false},
  };
  return all;
}

template <class T, class K>
std::vector<T> run_rope(const RopeCase& c) {
  Rng rng(53);
  const auto n = static_cast<std::size_t>(c.tokens * c.heads * c.dim), half = static_cast<std::size_t>(c.dim / 2);
  std::vector<std::int32_t> positions(static_cast<std::size_t>(c.tokens));
  for (std::size_t t = 0; t < positions.size(); ++t)
    positions[t] = c.positions == RopeCase::restarting ? static_cast<std::int32_t>(t % 5)
                   : c.positions == RopeCase::distinct ? static_cast<std::int32_t>(3 * t + 1)
                                                       : static_cast<std::int32_t>(60000 + 7 * t);
  std::vector<T> inv_freq(half);
  for (std::size_t i = 0; i < half; ++i) inv_freq[i] = static_cast<T>(std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(c.dim)));
  std::vector<T> x = uniform<T>(n, rng);
  std::vector<T> y = c.beta == 0 && !c.in_place ? uninitialized_device<T>(static_cast<index_t>(n)) : uniform<T>(n, rng);
  if (c.in_place) y = x;
  const T* in = c.in_place ? y.data() : x.data();
  K::Indexing::template rope<T>(c.tokens, c.heads, c.dim, positions.data(), inv_freq.data(), c.sign, in,
                                static_cast<T>(c.beta), y.data());
  return y;
}

template <class T>
void check_rope_against_cpu() {
  for (const RopeCase& c : rope_cases())
    check_close("rope", c.name, run_rope<T, EmulatedKernels>(c), run_rope<T, CpuKernels>(c), tolerance_for<T>(2.5e-7));
}

// ---- cross-entropy and the fused head ----------------------------------------------------------

struct LossCase {
  const char* name;
  index_t rows, vocab;
  bool masked;  // row 1 weight 0, row 2 weight 0.5 (else no mask)
  double cap;   // the fused head's soft cap (0: none)
  enum Grad { none, separate, aliased } grad;
};

const std::vector<LossCase>& loss_cases() {
  static const std::vector<LossCase> all{
      {"(3, 7): fewer columns than threads, no mask", 3, 7, false, 0.0, LossCase::separate},
      {"(5, 1000), masked, cap 15, gradient over the logits", 5, 1000, true, 15.0, LossCase::aliased},
      {"(4, 3000), masked, cap 20, gradient apart", 4, 3000, true, 20.0, LossCase::separate},
      {"(4, 600), cap 30, no gradient", 4, 600, false, 30.0, LossCase::none},
  };
  return all;
}

template <class T>
struct LossRun {
  std::vector<T> losses, lse, glogits, zc, head_losses, head_lse, grad;
  std::vector<std::vector<T>> outputs() const { return {losses, lse, glogits, zc, head_losses, head_lse, grad}; }
};

template <class T, class K>
LossRun<T> run_loss(const LossCase& c) {
  Rng rng(57);
  const auto n = static_cast<std::size_t>(c.rows * c.vocab), rows = static_cast<std::size_t>(c.rows);
  const std::vector<T> logits = uniform<T>(n, rng, -8, 8);
  std::vector<std::int32_t> targets = ids_below(rows, c.vocab, rng);
  targets[0] = static_cast<std::int32_t>(c.vocab - 1);  // the last column
  if (rows > 3) targets[3] = 0;                          // the first column
  // column 255, owned by a block's last thread (the last column of a shorter row)
  if (rows > 2) targets[2] = static_cast<std::int32_t>(std::min<index_t>(255, c.vocab - 1));
  std::vector<T> mask(rows, T(1));
  if (c.masked) mask[1] = T(0), mask[2] = T(0.5);
  const T* m = c.masked ? mask.data() : nullptr;
  const T scale = T(1) / T(3);

  LossRun<T> r{uninitialized_device<T>(c.rows), uninitialized_device<T>(c.rows), std::vector<T>(n, T(0.25)), logits,
               uninitialized_device<T>(c.rows), uninitialized_device<T>(c.rows),
               c.grad == LossCase::separate ? uninitialized_device<T>(c.rows * c.vocab) : std::vector<T>{}};
  K::Indexing::template cross_entropy<T>(c.rows, c.vocab, logits.data(), targets.data(), m, r.losses.data(), r.lse.data());
  K::Indexing::template cross_entropy_backward<T>(c.rows, c.vocab, logits.data(), r.lse.data(), targets.data(), m, scale,
                                                  r.glogits.data());
  T* grad = c.grad == LossCase::separate ? r.grad.data() : c.grad == LossCase::aliased ? r.zc.data() : nullptr;
  K::Head::template forward<T>({c.rows, c.vocab, c.cap, static_cast<double>(scale)},
                               {r.zc.data(), targets.data(), m, r.head_losses.data(), r.head_lse.data(), grad});
  return r;
}

template <class T>
void check_losses_against_cpu() {
  const double tolerance = tolerance_for<T>(5e-7);
  for (const LossCase& c : loss_cases()) {
    const LossRun<T> got = run_loss<T, EmulatedKernels>(c), want = run_loss<T, CpuKernels>(c);
    check_close("losses", c.name, got.losses, want.losses, tolerance);
    check_close("lse", c.name, got.lse, want.lse, tolerance);
    check_close("dlogits", c.name, got.glogits, want.glogits, tolerance);
    check_close(c.grad == LossCase::aliased ? "head grad" : "head zc", c.name, got.zc, want.zc, tolerance);
    check_close("head losses", c.name, got.head_losses, want.head_losses, tolerance);
    check_close("head lse", c.name, got.head_lse, want.head_lse, tolerance);
    if (c.grad == LossCase::separate) check_close("head grad", c.name, got.grad, want.grad, tolerance);
    if (c.masked)  // a row of weight 0: no loss and no gradient, on either backend exactly
      for (const LossRun<T>* run : {&got, &want}) {
        INFO(c.name << (run == &got ? ", emulated" : ", CPU"));
        const auto row = static_cast<std::size_t>(c.vocab);
        CHECK(run->losses[1] == T(0));
        CHECK(run->head_losses[1] == T(0));
        const std::vector<T>& head_grad = c.grad == LossCase::aliased ? run->zc : run->grad;
        for (std::size_t v = 0; v < row; ++v) {
          if (run->glogits[row + v] != T(0.25)) FAIL("the cross-entropy gradient of a weight-0 row at column " << v);
          if (c.grad != LossCase::none && head_grad[row + v] != T(0))
            FAIL("the fused head's gradient of a weight-0 row at column " << v);
        }
      }
  }
}

// ---- the MoE gated combine ---------------------------------------------------------------------

struct CombineCase {
  const char* name;
  index_t tokens, k, d;
  bool dys, dgate;  // which gradients the backward adds into
};

const std::vector<CombineCase>& combine_cases() {
  static const std::vector<CombineCase> all{
      {"37 tokens, top-1, width 5", 37, 1, 5, true, true},
      {"20 tokens, top-2, width 300 (two column strides)", 20, 2, 300, true, true},
      {"9 tokens, top-4, width 64, dgate only", 9, 4, 64, false, true},
      {"9 tokens, top-4, width 64, dys only", 9, 4, 64, true, false},
      {"no tokens", 0, 2, 8, true, true},
  };
  return all;
}

template <class T>
struct CombineRun {
  std::vector<T> y, dys, dgate;
  std::vector<std::vector<T>> outputs() const { return {y, dys, dgate}; }
};

template <class T, class K>
CombineRun<T> run_combine(const CombineCase& c) {
  Rng rng(59);
  const auto rows = static_cast<std::size_t>(c.tokens * c.k), width = static_cast<std::size_t>(c.d);
  std::vector<std::int32_t> row_of_slot(rows);  // a permutation of the rows (Fisher-Yates)
  for (std::size_t r = 0; r < rows; ++r) row_of_slot[r] = static_cast<std::int32_t>(r);
  for (std::size_t r = rows; r > 1; --r) std::swap(row_of_slot[r - 1], row_of_slot[rng.below(r)]);
  const std::vector<T> gate = uniform<T>(rows, rng, 0, 1), ys = uniform<T>(rows * width, rng),
                       dy = uniform<T>(static_cast<std::size_t>(c.tokens) * width, rng);
  CombineRun<T> r{uninitialized_device<T>(c.tokens * c.d), std::vector<T>(rows * width, T(0.25)),
                  std::vector<T>(rows, T(0.25))};
  const kernels::GatedCombineParams p{c.tokens, c.k, c.d};
  const kernels::GatedCombineArgs<T> a{row_of_slot.data(), gate.data(), ys.data(), r.y.data()};
  K::Combine::template forward<T>(p, a);
  K::Combine::template backward<T>(p, a, {dy.data(), c.dys ? r.dys.data() : nullptr, c.dgate ? r.dgate.data() : nullptr});
  return r;
}

template <class T>
void check_combine_against_cpu() {
  for (const CombineCase& c : combine_cases()) {
    const CombineRun<T> got = run_combine<T, EmulatedKernels>(c), want = run_combine<T, CpuKernels>(c);
    check_close("combine y", c.name, got.y, want.y, tolerance_for<T>(2.5e-7));
    check_close("combine dys", c.name, got.dys, want.dys, tolerance_for<T>(2.5e-7));
    check_close("combine dgate", c.name, got.dgate, want.dgate, tolerance_for<T>(5e-7));
  }
}

}  // namespace

TEST_CASE("indexing: gathers and the scatter-add on the emulator are the CPU's bits, float and double", "[indexing]") {
  check_tables_against_cpu<float>();
  check_tables_against_cpu<double>();
}

TEST_CASE("indexing: RoPE on the emulator matches the CPU kernel, float and double", "[indexing]") {
  check_rope_against_cpu<float>();
  check_rope_against_cpu<double>();
}

TEST_CASE("indexing: cross-entropy and the fused softcap head on the emulator match the CPU kernels", "[indexing]") {
  check_losses_against_cpu<float>();
  check_losses_against_cpu<double>();
}

TEST_CASE("indexing: the MoE gated combine on the emulator matches the CPU kernel, float and double", "[indexing]") {
  check_combine_against_cpu<float>();
  check_combine_against_cpu<double>();
}

TEST_CASE("indexing: the same bits run to run and under reversed and greedy schedules", "[indexing]") {
  const auto check_schedules = [](const std::string& name, const auto& run) {
    INFO(name);
    check_same_bits_under_schedules(run);
  };
  for (const TableCase& c : table_cases())
    check_schedules(c.name, [&] { return run_table<float, EmulatedKernels>(c).outputs(); });
  for (const RopeCase& c : rope_cases())
    check_schedules(c.name, [&] { return std::vector<std::vector<float>>{run_rope<float, EmulatedKernels>(c)}; });
  for (const LossCase& c : loss_cases())
    check_schedules(c.name, [&] { return run_loss<float, EmulatedKernels>(c).outputs(); });
  for (const CombineCase& c : combine_cases())
    check_schedules(c.name, [&] { return run_combine<float, EmulatedKernels>(c).outputs(); });
}

TEST_CASE("indexing: the fused head's barrier before its in-place gradient is needed", "[indexing]") {
  // The gradient overwrites the logits (grad aliases them). Without the barrier, a thread that owns
  // a target's column and runs before thread 0 writes its gradient over zc[target] before thread 0
  // reads it for the loss. On the emulator the thread that completes a barrier goes on at once and
  // round robin then runs the threads after it: block_sum's last barrier is completed by a lane of
  // warp 0 (its second shuffle tree runs after the other warps have parked there), so threads up
  // to 255 write their gradients before thread 0 runs: thread 231 owns row 0's target (column 999)
  // and thread 255 row 2's (column 255).
  const LossCase& c = loss_cases()[1];
  REQUIRE(c.grad == LossCase::aliased);
  const unsigned barrier = device_line("indexing.cuh", "z[target] is read above before any thread overwrites it");
  REQUIRE(barrier > 0);
  const LossRun<double> want = run_loss<double, CpuKernels>(c);
  const auto head_loss_error = [&](bool skip_barrier) {
    Options o = options();
    if (skip_barrier) o.skip_barrier_line = barrier;
    const OptionsScope scope(o);
    return scaled_error(run_loss<double, EmulatedKernels>(c).head_losses, want.head_losses);
  };
  CHECK(head_loss_error(false) <= 1e-13);
  CHECK(head_loss_error(true) > 1e-3);
}

}  // namespace megacpp::cuda_emulation
