// tests/cuda/backend_cases.hpp: every layers-independent op (forward and backward) and the
// kernels the ops do not reach on their own, written once against any Backend.
//
// The same cases are instantiated for Cpu (cpu_reference.cpp, compiled by the host compiler)
// and for Cuda (test_cuda_backend.cu, compiled by nvcc); the CUDA test compares the two
// (ggml's test-backend-ops idea: backend against backend). The harness a case runs in (inputs
// drawn on the host from a seeded Rng, results as doubles) is tests/support/backend_harness.hpp,
// shared with the kernel cases (tests/support/kernel_cases.hpp). This header includes no
// backend, so nvcc never sees Eigen.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/backend_harness.hpp"

#include "megacpp/autograd.hpp"
#include "megacpp/nn/linear_cross_entropy.hpp"
#include "megacpp/optim/functors.hpp"

namespace megacpp::backend_test {

using testing::Harness;
using testing::Outputs;

template <class T, Backend B>
struct Case {
  const char* name;
  Outputs (*run)(Harness<T, B>&);
  bool exact = false;  // same operation order on both backends: results must be bitwise equal
};

// The op cases. Shapes are small (the CPU runs them in the same test) but large enough that the
// CUDA row and reduction kernels use several warps, several blocks and their tails.
template <class T, Backend B>
std::vector<Case<T, B>> op_cases() {
  using H = Harness<T, B>;
  using V = Var<T, B>;
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  return {
      {"matmul (3,4,5) x (5,6), batch folded into rows",
       [](H& h) { V a = h.param({3, 4, 5}), b = h.param({5, 6}); return h.finish(matmul(a, b), {a, b}); }},
      {"matmul (2,5,4)^T x shared (5,6)",
       [](H& h) { V a = h.param({2, 5, 4}), b = h.param({5, 6}); return h.finish(matmul(a, b, true, false), {a, b}); }},
      {"matmul batched (2,3,4,5) x (2,3,6,5)^T",
       [](H& h) { V a = h.param({2, 3, 4, 5}), b = h.param({2, 3, 6, 5}); return h.finish(matmul(a, b, false, true), {a, b}); }},
      {"matmul shared (5,4)^T x batched (3,6,5)^T",
       [](H& h) { V a = h.param({5, 4}), b = h.param({3, 6, 5}); return h.finish(matmul(a, b, true, true), {a, b}); }},
      {"add (4,3,5) + broadcast (5)",
       [](H& h) { V a = h.param({4, 3, 5}), b = h.param({5}); return h.finish(add(a, b), {a, b}); }},
      {"sub broadcast (3,5) - (4,3,5)",
       [](H& h) { V a = h.param({3, 5}), b = h.param({4, 3, 5}); return h.finish(sub(a, b), {a, b}); }},
      {"mul (4,6) * one element (1)",
       [](H& h) { V a = h.param({4, 6}), b = h.param({1}); return h.finish(mul(a, b), {a, b}); }},
      {"div (4,6) / (4,6)",
       [](H& h) { V a = h.param({4, 6}), b = h.param({4, 6}, 0.5, 2.0); return h.finish(div(a, b), {a, b}); }},
      {"div broadcast (6) / (4,6)",
       [](H& h) { V a = h.param({6}), b = h.param({4, 6}, 0.5, 2.0); return h.finish(div(a, b), {a, b}); }},
      {"scale, add_scalar, negate",
       [](H& h) { V x = h.param({3, 7}); return h.finish(-add_scalar(scale(x, 2.5), 0.75), {x}); }},
      {"sum axis 1", [](H& h) { V x = h.param({3, 4, 5}); return h.finish(sum(x, 1), {x}); }},
      {"mean axis -1 keepdim", [](H& h) { V x = h.param({3, 4, 5}); return h.finish(mean(x, -1, true), {x}); }},
      {"sum of everything", [](H& h) { V x = h.param({3, 4, 5}); return h.finish(sum(x), {x}); }},
      {"mean of everything", [](H& h) { V x = h.param({7, 300}); return h.finish(mean(x), {x}); }},
      {"sum long rows (2,1000) axis -1", [](H& h) { V x = h.param({2, 1000}); return h.finish(sum(x, -1), {x}); }},
      {"mean long columns (300,70) axis 0", [](H& h) { V x = h.param({300, 70}); return h.finish(mean(x, 0), {x}); }},
      {"exp", [](H& h) { V x = h.param({5, 9}, -3, 3); return h.finish(exp(x), {x}); }},
      {"log", [](H& h) { V x = h.param({5, 9}, 0.5, 3); return h.finish(log(x), {x}); }},
      {"tanh", [](H& h) { V x = h.param({5, 9}, -3, 3); return h.finish(tanh(x), {x}); }},
      {"sigmoid", [](H& h) { V x = h.param({5, 9}, -3, 3); return h.finish(sigmoid(x), {x}); }},
      {"relu", [](H& h) { V x = h.param({5, 9}, -3, 3); return h.finish(relu(x), {x}); }},
      {"relu2", [](H& h) { V x = h.param({5, 9}, -3, 3); return h.finish(relu2(x), {x}); }},
      {"silu", [](H& h) { V x = h.param({5, 9}, -3, 3); return h.finish(silu(x), {x}); }},
      {"softcap 2", [](H& h) { V x = h.param({5, 9}, -5, 5); return h.finish(softcap(x, 2.0), {x}); }},
      {"softmax (4,7) with a fully masked (-inf) row",
       [](H& h) {
         std::vector<T> v = h.uniform({4, 7}, -3, 3).to_host();
         for (int c = 0; c < 7; ++c) v[2 * 7 + c] = -std::numeric_limits<T>::infinity();
         V x = V::parameter(Tensor<T, B>::from_host(Shape{4, 7}, v));
         return h.finish(softmax(x), {x});
       }},
      {"softmax wide (3,1000)", [](H& h) { V x = h.param({3, 1000}, -4, 4); return h.finish(softmax(x), {x}); }},
      {"log_softmax (4,300)", [](H& h) { V x = h.param({4, 300}, -4, 4); return h.finish(log_softmax(x), {x}); }},
      {"rmsnorm (3,4,64) with gain",
       [](H& h) { V x = h.param({3, 4, 64}), g = h.param({64}, 0.5, 1.5); return h.finish(rmsnorm(x, g, 1e-5), {x, g}); }},
      {"rmsnorm (5,300) without gain", [](H& h) { V x = h.param({5, 300}); return h.finish(rmsnorm(x), {x}); }},
      {"rmsnorm (5,37) without gain: a warp per row, one element per lane (37 is no whole packet)",
       [](H& h) { V x = h.param({5, 37}); return h.finish(rmsnorm(x), {x}); }},
      {"rmsnorm (3,9000) with gain: rows past the warp kernels' width, a block per row",
       [](H& h) { V x = h.param({3, 9000}), g = h.param({9000}, 0.5, 1.5); return h.finish(rmsnorm(x, g, 1e-5), {x, g}); }},
      {"rmsnorm with a constant gain (no gain gradient)",
       [](H& h) { V x = h.param({6, 40}); V g(h.uniform({40}, 0.5, 1.5)); return h.finish(rmsnorm(x, g), {x, g}); }},
      {"embedding (10,8), ids (3,5)",
       [](H& h) { V t = h.param({10, 8}); return h.finish(embedding(t, h.ids({3, 5}, 10)), {t}); }},
      {"embedding (7,200), 50 ids with repeats",
       [](H& h) { V t = h.param({7, 200}); return h.finish(embedding(t, h.ids({50}, 7)), {t}); }},
      {"rope (2,3,4,8) up to position 60000",
       [](H& h) {
         V x = h.param({2, 3, 4, 8});
         const auto pos = Tensor<std::int32_t, B>::from_host(Shape{2, 3}, {0, 1, 2, 5, 1000, 60000});
         return h.finish(rope(x, pos, 10000.0), {x});
       }},
      {"rope (2,3,7,6): heads in groups of 4 and a partial group of 3",
       [](H& h) {
         V x = h.param({2, 3, 7, 6});
         const auto pos = Tensor<std::int32_t, B>::from_host(Shape{2, 3}, {3, 4, 5, 0, 7, 300});
         return h.finish(rope(x, pos, 500.0), {x});
       }},
      {"reshape then transpose axes 0,2",
       [](H& h) { V x = h.param({2, 3, 4, 5}); return h.finish(transpose(reshape(x, {6, 4, -1}), 0, 2), {x}); }},
      {"transpose axes 1,3 of (2,3,4,5)",
       [](H& h) { V x = h.param({2, 3, 4, 5}); return h.finish(transpose(x, 1, 3), {x}); }},
      {"slice axis 1 [1,3) of (2,4,5)", [](H& h) { V x = h.param({2, 4, 5}); return h.finish(slice(x, 1, 1, 3), {x}); }},
      {"concat axis 1, middle input constant",
       [](H& h) {
         V a = h.param({2, 1, 3}), b(h.uniform({2, 3, 3})), c = h.param({2, 2, 3});
         return h.finish(concat(std::vector<V>{a, b, c}, 1), {a, b, c});
       }},
      {"cast round trip through the other float type",
       [](H& h) { V x = h.param({4, 5}); return h.finish(cast<T>(scale(cast<Other>(x), 1.5)), {x}); }},
      {"cross_entropy mean (2,3,50)",
       [](H& h) { V z = h.param({2, 3, 50}, -3, 3); return h.finish(cross_entropy(z, h.ids({2, 3}, 50)), {z}); }},
      {"cross_entropy mean with loss mask",
       [](H& h) {
         V z = h.param({6, 40}, -3, 3);
         const auto mask = Tensor<T, B>::from_host(Shape{6}, {T(1), T(0), T(1), T(1), T(0), T(1)});
         return h.finish(cross_entropy(z, h.ids({6}, 40), mask), {z});
       }},
      {"cross_entropy_per_token (4,2000) with loss mask",
       [](H& h) {
         V z = h.param({4, 2000}, -3, 3);
         const auto mask = Tensor<T, B>::from_host(Shape{4}, {T(1), T(0), T(0.5), T(1)});
         return h.finish(cross_entropy_per_token(z, h.ids({4}, 2000), mask), {z});
       }},
      {"linear_cross_entropy: softcap 30, loss mask, 3 row chunks, vocab 300",
       [](H& h) {
         V x = h.param({7, 24}), w = h.param({300, 24}, -2, 2);
         const auto mask = Tensor<T, B>::from_host(Shape{7}, {T(1), T(0), T(1), T(0.5), T(1), T(1), T(0)});
         return h.finish(linear_cross_entropy(x, w, h.ids({7}, 300), mask, {.softcap = 30.0, .chunk_rows = 3}), {x, w});
       }},
      {"chain: rmsnorm, matmul, relu2, matmul, softcap, cross_entropy + mean(x*x)",
       [](H& h) {
         V x = h.param({4, 16}), g = h.param({16}, 0.5, 1.5), w1 = h.param({16, 32}), w2 = h.param({32, 10});
         const V logits = softcap(matmul(relu2(matmul(rmsnorm(x, g), w1)), w2), 30.0);
         return h.finish(add(cross_entropy(logits, h.ids({4}, 10)), mean(mul(x, x))), {x, g, w1, w2});
       }},
  };
}

// The elements of a bf16 rounding written from `offset` on (zeros before: an update's, a
// map_to_bf16's) that are not convert's rounding of `values` (0 expected), as one output to compare.
template <class T, Backend B>
double rounding_mismatches(const Tensor<bf16, B>& rounded, const Tensor<T, B>& values, index_t offset) {
  const auto got = rounded.to_host(), want = values.template to<bf16>().to_host();
  double mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    mismatches += i < static_cast<std::size_t>(offset) ? got[i].bits != 0 : got[i].bits != want[i].bits;
  return mismatches;
}

// Kernel-level cases: arguments the ops never pass (padded leading dimensions, alpha, beta
// other than 0 and 1, broadcast operands of reduce, NaN in an overwritten output).
template <class T, Backend B>
std::vector<Case<T, B>> kernel_cases() {
  using H = Harness<T, B>;
  using Tens = Tensor<T, B>;
  return {
      {"gemm: padded ld, shared B^T (stride 0), alpha 0.5, beta 0.5; A^T with beta 0 over NaN; k = 0",
       [](H& h) {
         const index_t batch = 3, m = 4, n = 6, k = 5, lda = 7, ldb = 8, ldc = 9;
         Tens a = h.uniform({batch, m, lda}), b = h.uniform({n, ldb}), c = h.uniform({batch, m, ldc});
         const GemmArgs g1{.trans_a = false, .trans_b = true, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                           .stride_a = m * lda, .stride_b = 0, .stride_c = m * ldc, .batch = batch};
         B::template gemm<T>(g1, T(0.5), a.data(), b.data(), T(0.5), c.data());
         // A stored (k, m) per batch entry, B (k, n): op(A) = A^T.
         Tens at = h.uniform({batch, k, lda}), b2 = h.uniform({k, ldb});
         Tens c2 = h.filled({batch, m, ldc}, std::numeric_limits<T>::quiet_NaN());
         const GemmArgs g2{.trans_a = true, .trans_b = false, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                           .stride_a = k * lda, .stride_b = 0, .stride_c = m * ldc, .batch = batch};
         B::template gemm<T>(g2, T(1), at.data(), b2.data(), T(0), c2.data());
         // Empty inner dimension: C = beta * C (beta 0 writes zeros over NaN).
         Tens c3 = h.filled({m, ldc}, std::numeric_limits<T>::quiet_NaN());
         const GemmArgs g3{.m = m, .n = n, .k = 0, .lda = 1, .ldb = ldb, .ldc = ldc, .batch = 1};
         B::template gemm<T>(g3, T(1), a.data(), b.data(), T(0), c3.data());
         return H::values({c, c2, c3});
       }},
      {"reduce: broadcast operand, scale 0.25, beta 1; contiguous rows; beta 0.5",
       [](H& h) {
         Tens x = h.uniform({3, 5, 7}), w = h.uniform({7}), out = h.uniform({3, 7});
         B::template reduce<T>(3, 5, 7, fn::Mul{}, T(0.25), T(1), out.data(), In<T>{x.data()}, In<T>{w.data(), true});
         Tens x2 = h.uniform({4, 1000}), out2 = h.filled({4}, std::numeric_limits<T>::quiet_NaN());
         B::template reduce<T>(4, 1000, 1, fn::Square{}, T(1), T(0), out2.data(), In<T>{x2.data()});
         Tens x3 = h.uniform({2, 300, 40}), out3 = h.uniform({2, 40});
         B::template reduce<T>(2, 300, 40, fn::Identity{}, T(1) / T(300), T(0.5), out3.data(), In<T>{x3.data()});
         return H::values({out, out2, out3});
       }},
      // Shapes whose outputs alone leave the GPU idle: CUDA cuts j into chunks and sums in two passes
      // (detail/reduce.cuh).
      {"reduce in two passes: a bias's gradient (1, 4096, 96), uneven chunks (2, 1000, 40) with beta 0 over NaN, "
       "a sum of everything (1, 100000, 1) with scale and beta",
       [](H& h) {
         Tens x = h.uniform({4096, 96}), w = h.uniform({96}), out = h.uniform({96});
         B::template reduce<T>(1, 4096, 96, fn::Mul{}, T(1), T(1), out.data(), In<T>{x.data()}, In<T>{w.data(), true});
         Tens x2 = h.uniform({2, 1000, 40}), out2 = h.filled({2, 40}, std::numeric_limits<T>::quiet_NaN());
         B::template reduce<T>(2, 1000, 40, fn::Square{}, T(1), T(0), out2.data(), In<T>{x2.data()});
         Tens x3 = h.uniform({100000}), out3 = h.uniform({1});
         B::template reduce<T>(1, 100000, 1, fn::Square{}, T(1e-5), T(0.5), out3.data(), In<T>{x3.data()});
         return H::values({out, out2, out3});
       }},
      {"rmsnorm's gain gradient over many rows, in chunks: (4096, 512) and uneven (1000, 40); gx and ggain added into",
       [](H& h) {
         Outputs outs;
         for (const auto& [rows, cols] : {std::pair<index_t, index_t>{4096, 512}, {1000, 40}}) {
           Tens x = h.uniform({rows, cols}), gain = h.uniform({cols}, 0.5, 1.5), gy = h.uniform({rows, cols});
           Tens y = h.uniform({rows, cols}), rstd = h.uniform({rows}), gx = h.uniform({rows, cols}), ggain = h.uniform({cols});
           B::template rmsnorm<T>(rows, cols, x.data(), gain.data(), T(1e-6), y.data(), rstd.data());
           B::template rmsnorm_backward<T>(rows, cols, x.data(), gain.data(), rstd.data(), gy.data(), gx.data(),
                                           ggain.data());
           for (const Tens* t : {&y, &rstd, &gx, &ggain}) outs.push_back(H::doubles(*t));
         }
         return outs;
       }},
      {"map: 3 and 4 operands with broadcast, output aliasing an operand",
       [](H& h) {
         Tens out = h.uniform({5, 6}), a = h.uniform({5, 6}), bias = h.uniform({6});
         B::template map<T>(5, 6, fn::AccumulateOf<fn::Mul>{}, out.data(), In<T>{out.data()}, In<T>{a.data()},
                            In<T>{bias.data(), true});
         Tens out2 = h.uniform({5, 6}), g = h.uniform({5, 6}), den = h.uniform({6}, 0.5, 2.0);
         B::template map<T>(5, 6, fn::AccumulateOf<fn::DivRhsGrad>{}, out2.data(), In<T>{out2.data()}, In<T>{g.data()},
                            In<T>{a.data()}, In<T>{den.data(), true});
         return H::values({out, out2});
       }},
      {"map a 16-byte packet per thread: (33,128) with a broadcast row and the output aliasing an operand; "
       "the one-element kernel for a ragged length, an unaligned pointer, and a broadcast row that is no whole packet",
       [](H& h) {
         Tens out = h.uniform({33, 128}), a = h.uniform({33, 128}), bias = h.uniform({128});
         B::template map<T>(33, 128, fn::AccumulateOf<fn::Mul>{}, out.data(), In<T>{out.data()}, In<T>{a.data()},
                            In<T>{bias.data(), true});
         Tens sq = h.uniform({33, 128});
         B::template map<T>(33, 128, fn::Relu2{}, sq.data(), In<T>{a.data()});
         Tens ragged = h.uniform({7, 31}), b = h.uniform({7, 31});
         B::template map<T>(7, 31, fn::Add{}, ragged.data(), In<T>{ragged.data()}, In<T>{b.data()});
         Tens shifted = h.uniform({4 * 32 + 1}), c = h.uniform({4 * 32 + 1});
         B::template map<T>(4, 32, fn::Add{}, shifted.data() + 1, In<T>{shifted.data() + 1}, In<T>{c.data() + 1});
         Tens odd_rows = h.uniform({8, 6}), bias6 = h.uniform({6});
         B::template map<T>(8, 6, fn::Add{}, odd_rows.data(), In<T>{odd_rows.data()}, In<T>{bias6.data(), true});
         return H::values({out, sq, ragged, shifted, odd_rows});
       }},
      {"expand, copy_2d and transpose with beta 0 and 1",
       [](H& h) {
         Tens src = h.uniform({2, 4}), dst = h.uniform({2, 3, 4});
         B::template expand<T>(2, 3, 4, T(2), src.data(), T(1), dst.data());
         Tens rows = h.uniform({3, 7}), packed = h.uniform({3, 5}), fresh = h.uniform({3, 5});
         B::template copy_2d<T>(3, 4, rows.data() + 1, 7, T(1), packed.data(), 5);
         B::template copy_2d<T>(3, 4, rows.data() + 2, 7, T(0), fresh.data() + 1, 5);
         Tens x = h.uniform({2, 3, 2, 4, 3}), acc = h.uniform({2, 4, 2, 3, 3}), over = h.uniform({2, 4, 2, 3, 3});
         B::template transpose<T>(2, 3, 2, 4, 3, x.data(), T(1), acc.data());
         B::template transpose<T>(2, 3, 2, 4, 3, x.data(), T(0), over.data());
         return H::values({dst, packed, fresh, acc, over});
       }},
      {"softcap_cross_entropy: cap 5 with the gradient in place and masked rows; cap 0 into a separate buffer",
       [](H& h) {
         Tens z = h.uniform({4, 37}, -8, 8), losses = h.uniform({4}), lse = h.uniform({4});
         const auto mask = Tensor<T, B>::from_host(Shape{4}, {T(1), T(0), T(0.5), T(1)});
         using Kernel = kernels::SoftcapCrossEntropy<B>;
         Kernel::template forward<T>({4, 37, 5.0, 0.25},
                                     {z.data(), h.ids({4}, 37).data(), mask.data(), losses.data(), lse.data(), z.data()});
         Tens z2 = h.uniform({3, 1000}, -3, 3), losses2 = h.uniform({3}), lse2 = h.uniform({3});
         Tens g2 = h.filled({3, 1000}, std::numeric_limits<T>::quiet_NaN());
         Kernel::template forward<T>({3, 1000, 0.0, 1.0},
                                     {z2.data(), h.ids({3}, 1000).data(), nullptr, losses2.data(), lse2.data(), g2.data()});
         return H::values({z, losses, lse, z2, losses2, lse2, g2});
       }},
      {"softcap_cross_entropy: rows of 13000 with the gradient in place and without a gradient (the logits become zc); "
       "rows of 50 without a gradient",
       [](H& h) {
         Tens z = h.uniform({2, 13000}, -8, 8), losses = h.uniform({2}), lse = h.uniform({2});
         using Kernel = kernels::SoftcapCrossEntropy<B>;
         Kernel::template forward<T>({2, 13000, 30.0, 0.5}, {z.data(), h.ids({2}, 13000).data(), nullptr, losses.data(),
                                                             lse.data(), z.data()});
         Tens z2 = h.uniform({2, 13000}, -8, 8), losses2 = h.uniform({2}), lse2 = h.uniform({2});
         Kernel::template forward<T>({2, 13000, 30.0, 0.5}, {z2.data(), h.ids({2}, 13000).data(), nullptr, losses2.data(),
                                                              lse2.data(), nullptr});
         Tens z3 = h.uniform({3, 50}, -8, 8), losses3 = h.uniform({3}), lse3 = h.uniform({3});
         Kernel::template forward<T>({3, 50, 5.0, 1.0}, {z3.data(), h.ids({3}, 50).data(), nullptr, losses3.data(),
                                                         lse3.data(), nullptr});
         return H::values({z, losses, lse, z2, losses2, lse2, z3, losses3, lse3});
       }},
      {"update_in_place: one AdamW step over 1000 elements (p, m, v updated from g; a packet per thread)",
       [](H& h) {
         Tens p = h.uniform({1000}), m = h.uniform({1000}, -0.1, 0.1), v = h.uniform({1000}, 0.0, 0.01), g = h.uniform({1000});
         B::template update_in_place<T>(1000, fn::AdamWStep{fn::Lerp{0.1}, fn::EmaSquare{0.95}, fn::AdamWUpdate{0.999, 1e-2, 0.3, 1e-8}},
                                        p.data(), m.data(), v.data(), g.data());
         return H::values({p, m, v});
       }},
      {"update_in_place: AdamW over 1001 elements from an unaligned pointer (one element per thread)",
       [](H& h) {
         Tens p = h.uniform({1002}), m = h.uniform({1002}, -0.1, 0.1), v = h.uniform({1002}, 0.0, 0.01), g = h.uniform({1002});
         B::template update_in_place<T>(1001, fn::AdamWStep{fn::Lerp{0.1}, fn::EmaSquare{0.95}, fn::AdamWUpdate{0.999, 1e-2, 0.3, 1e-8}},
                                        p.data() + 1, m.data() + 1, v.data() + 1, g.data() + 1);
         return H::values({p, m, v});
       }},
      {"update_in_place: AdamW writing the parameter's bf16 rounding in the same pass (packets; unaligned, ragged): "
       "p, m, v as without it, and the rounding convert's (mismatches counted, 0 expected)",
       [](H& h) {
         Outputs out;
         for (const auto& [n, offset] : {std::pair<index_t, index_t>{1000, 0}, {1001, 1}}) {
           const Shape s{n + offset};
           Tens p = h.uniform(s), m = h.uniform(s, -0.1, 0.1), v = h.uniform(s, 0.0, 0.01), g = h.uniform(s);
           Tensor<bf16, B> rounded = Tensor<bf16, B>::full(s, bf16(0.0f));
           B::template update_in_place<T>(n, fn::AdamWStep{fn::Lerp{0.1}, fn::EmaSquare{0.95}, fn::AdamWUpdate{0.999, 1e-2, 0.3, 1e-8}},
                                          p.data() + offset, m.data() + offset, v.data() + offset, g.data() + offset,
                                          rounded.data() + offset);
           for (const Tens* t : {&p, &m, &v}) out.push_back(H::doubles(*t));
           out.push_back({rounding_mismatches(rounded, p, offset)});
         }
         return out;
       }},
      {"update_in_place, one state: Muon's weight update writing its bf16 rounding (packets; unaligned, ragged): "
       "w, and the rounding convert's (mismatches counted, 0 expected)",
       [](H& h) {
         Outputs out;
         for (const auto& [n, offset] : {std::pair<index_t, index_t>{1000, 0}, {1001, 1}}) {
           const Shape s{n + offset};
           Tens w = h.uniform(s), o = h.uniform(s);
           Tensor<bf16, B> rounded = Tensor<bf16, B>::full(s, bf16(0.0f));
           B::template update_in_place<T>(n, fn::MuonStep{fn::MuonUpdate{0.998, 0.03}}, w.data() + offset, o.data() + offset,
                                          rounded.data() + offset);
           out.push_back(H::doubles(w));
           out.push_back({rounding_mismatches(rounded, w, offset)});
         }
         return out;
       }},
      {"map_to_bf16: relu2's gradient rounded to bf16 in its pass (packets, one 8-byte store of four; unaligned, "
       "ragged): the rounding map then convert's (mismatches counted, 0 expected)",
       [](H& h) {
         Outputs out;
         for (const auto& [n, offset] : {std::pair<index_t, index_t>{1024, 0}, {1001, 1}}) {
           const Shape s{n + offset};
           Tens g = h.uniform(s), u = h.uniform(s), full = h.uniform(s);
           Tensor<bf16, B> rounded = Tensor<bf16, B>::full(s, bf16(0.0f));
           const T* gi = g.data() + offset;
           const T* ui = u.data() + offset;
           B::template map_to_bf16<T>(n, fn::Relu2Grad{}, rounded.data() + offset, gi, ui, ui);
           B::template map<T>(1, n, fn::Relu2Grad{}, full.data() + offset, In<T>{gi}, In<T>{ui}, In<T>{ui});
           out.push_back(H::doubles(full));
           out.push_back({rounding_mismatches(rounded, full, offset)});
         }
         return out;
       }},
      {"scatter_add_rows: 300 rows into 5 (deterministic order)",
       [](H& h) {
         Tens gout = h.uniform({300, 70}), gtable = h.uniform({5, 70});
         const auto idx = h.ids({300}, 5);
         B::template scatter_add_rows<T>(300, 70, gout.data(), idx.data(), gtable.data());
         return H::values({gtable});
       },
       true},
      {"copy_from_host: 1 element to past the 63,488 bytes launches' parameters carry (3,968 per launch), and into a "
       "buffer a kernel queued before still reads",
       [](H& h) {
         Outputs out;
         const auto host_values = [](std::size_t n, int salt) {
           std::vector<T> v(n);
           for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<int>((i * 7 + salt) % 97) - 48) / T(4);
           return v;
         };
         const std::size_t part = 3968 / sizeof(T), limit = 16 * part;
         for (std::size_t n : {std::size_t{1}, std::size_t{3}, part - 1, part, part + 1, 5 * part + 3, limit, limit + 1}) {
           const std::vector<T> v = host_values(n, static_cast<int>(n));
           out.push_back(H::doubles(Tensor<T, B>::from_host(Shape{static_cast<index_t>(n)}, v)));
         }
         // y = 2 x is queued before x is overwritten from the host (three launches): y must hold
         // the old x doubled.
         const std::size_t n = 2 * part + 1;
         const auto count = static_cast<index_t>(n);
         Tens x = h.uniform({count}), y = h.uniform({count});
         B::template map<T>(1, count, fn::Scale{2.0}, y.data(), In<T>{x.data()});
         const std::vector<T> replacement = host_values(n, 5);
         B::template copy_from_host<T>(x.data(), replacement.data(), replacement.size());
         out.push_back(H::doubles(y));
         out.push_back(H::doubles(x));
         return out;
       },
       true},
      {"minmax_index: 5 ids and 100000 ids",
       [](H& h) {
         const auto few = Tensor<std::int32_t, B>::from_host(Shape{5}, {5, -3, 17, 2, 9});
         const auto many = h.ids({100000}, 1 << 30);
         const auto [lo, hi] = B::minmax_index(few.numel(), few.data());
         const auto [lo2, hi2] = B::minmax_index(many.numel(), many.data());
         return Outputs{{double(lo), double(hi), double(lo2), double(hi2)}};
       },
       true},
  };
}

// The seed of case `index`'s inputs: the same on every backend, so they all see the same data.
inline std::uint64_t case_seed(std::size_t index) { return 1000 + index; }

// gemm_bf16 (bf16 operands, fp32 sums and C): a float case only, since its output is fp32.
template <Backend B>
Case<float, B> gemm_bf16_case() {
  return {"gemm_bf16: all four transposes, padded ld, batch with shared B (stride 0), alpha 0.5, beta 0.5 and 0",
          [](Harness<float, B>& h) {
            Outputs out;
            const index_t batch = 2, m = 5, n = 7, k = 9, ld = 11;
            for (bool ta : {false, true})
              for (bool tb : {false, true}) {
                // (ld, ld) per entry holds op(A) (m, k) either way round, and op(B) (k, n)
                const Tensor<bf16, B> a = h.uniform({batch, ld, ld}).template to<bf16>();
                const Tensor<bf16, B> b = h.uniform({ld, ld}).template to<bf16>();
                Tensor<float, B> c = h.uniform({batch, m, ld});
                const GemmArgs g{.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .lda = ld, .ldb = ld, .ldc = ld,
                                 .stride_a = ld * ld, .stride_b = 0, .stride_c = m * ld, .batch = batch};
                B::gemm_bf16(g, 0.5f, a.data(), b.data(), ta == tb ? 0.5f : 0.0f, c.data());
                out.push_back(Harness<float, B>::doubles(c));
              }
            return out;
          }};
}

// The GroupedGemm contract on bf16 operands (fp32 sums and results, the MoE experts' products
// under Bf16Mixed): forward, then the backward adding into non-zero dX and dW (either left out:
// null, as for a frozen input or weight), over uneven groups with empty ones and sizes past a
// tile. A float case only, like gemm_bf16's. Variant 0: every gradient; 1: the last group empty,
// dW null; 2: the first and last groups empty, dX null.
template <Backend B, int kVariant>
Outputs grouped_gemm_bf16_outputs(Harness<float, B>& h) {
  const std::vector<index_t> offsets = kVariant == 0   ? std::vector<index_t>{0, 9, 9, 26, 27, 60}
                                       : kVariant == 1 ? std::vector<index_t>{0, 12, 30, 30}
                                                       : std::vector<index_t>{0, 0, 17, 17};
  const bool with_dx = kVariant != 2, with_dw = kVariant != 1;
  const index_t groups = static_cast<index_t>(offsets.size()) - 1, k = 40, n = 70, rows = offsets.back();
  const kernels::GroupedGemmParams p{groups, k, n, offsets.data()};
  const Tensor<bf16, B> x = h.uniform({rows, k}).template to<bf16>();
  const Tensor<bf16, B> w = h.uniform({groups, n, k}).template to<bf16>();
  const Tensor<bf16, B> dy = h.uniform({rows, n}).template to<bf16>();
  Tensor<float, B> y(Shape{rows, n});
  Tensor<float, B> dx = h.uniform({rows, k}), dw = h.uniform({groups, n, k});
  kernels::GroupedGemm<B>::template forward<float, bf16>(p, {x.data(), w.data(), y.data()});
  kernels::GroupedGemm<B>::template backward<float, bf16>(
      p, {x.data(), w.data(), nullptr}, {dy.data(), with_dx ? dx.data() : nullptr, with_dw ? dw.data() : nullptr});
  // A null gradient's buffer is compared too: it must come back as it was.
  return Outputs{Harness<float, B>::doubles(y), Harness<float, B>::doubles(dx), Harness<float, B>::doubles(dw)};
}

template <Backend B>
void push_grouped_gemm_bf16_cases(std::vector<Case<float, B>>& cases) {
  cases.push_back({"GroupedGemm on bf16 operands: 5 uneven groups (one empty), K 40, N 70, backward into non-zero grads",
                   grouped_gemm_bf16_outputs<B, 0>});
  cases.push_back({"GroupedGemm on bf16 operands: the last group empty, dX only (dW null)",
                   grouped_gemm_bf16_outputs<B, 1>});
  cases.push_back({"GroupedGemm on bf16 operands: the first and last groups empty, dW only (dX null)",
                   grouped_gemm_bf16_outputs<B, 2>});
}

// Every case, op cases first; both test translation units index into this one list.
template <class T, Backend B>
std::vector<Case<T, B>> all_cases() {
  std::vector<Case<T, B>> cases = op_cases<T, B>();
  for (auto& c : kernel_cases<T, B>()) cases.push_back(c);
  if constexpr (std::is_same_v<T, float>) {
    cases.push_back(gemm_bf16_case<B>());
    push_grouped_gemm_bf16_cases(cases);
  }
  return cases;
}

}  // namespace megacpp::backend_test
