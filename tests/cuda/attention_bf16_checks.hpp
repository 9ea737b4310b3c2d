// tests/cuda/attention_bf16_checks.hpp: the GPU checks of the bf16 tensor-core attention
// (CudaBf16Attention; kernels in backends/cuda/detail/attention_mma.cuh), for test_cuda_backend.cu.
//
// Each case of attention_bf16_cases.hpp runs FusedAttention<Cuda> forward, then backward from the
// forward's o and lse, on fp32 inputs inside the scope, and is compared with the double reference
// on the same inputs rounded to bf16 with exact P and dS (what an fp32 kernel computes on bf16
// inputs). What is left is the rounding of P and dS to bf16 (and fp32 sums):
//
//   each rounded value is off by at most u = 2^-8 of itself (bf16 keeps 8 significant bits), so
//   o_i = sum_j P_ij v_j / l_i is off by sum_j delta_ij P_ij v_j / l_i with |delta| <= u, and
//   dQ_i = scale sum_j dS_ij k_j (dK, dV alike) by scale sum_j delta_ij dS_ij k_j. The deltas are
//   independent, so the error grows like u sqrt(sum of squared terms), not the worst-case u sum|.|;
//   against the output's largest element it stays below u. Measured on these cases with these
//   seeds (the kernels' host emulation, which runs the same code): o <= 1.4e-3, dq <= 2.7e-3,
//   dk <= 2.7e-3, dv <= 1.5e-3 of the tensor's largest magnitude (0.35u to 0.7u). Tolerance 1e-2
//   (2.5u) for o, dq, dk, dv; LSE sums the exact P in fp32 (measured <= 1.7e-7): 1e-5.
//
// Plus, exactly: padding tokens get o = 0, lse = -inf and no gradient; a second run gives the same
// bits, and so does a backward that reads the bf16 copies its forward kept (kernels::AttentionSaved);
// the stats say the 64 x 64 tensor-core tiles ran; leaving the scope (or a nested scope that
// turns it off) gives the fp32 results back bit for bit; double and head_dim > 128 stay fp32; the
// op's own precision (AttentionParams::products, a Bf16Mixed model's) selects the same kernels.
#pragma once

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_bf16_cases.hpp"

#include "megacpp/autograd/backward.hpp"
#include "megacpp/backends/cuda.cuh"
#include "megacpp/nn/attention/flash_attention.hpp"

namespace megacpp::attention_bf16_test {

// The tolerances (kOutputTolerance, kGradientTolerance, kLseTolerance, derived above) are in
// attention_bf16_cases.hpp, which the host emulation (tests/cuda_emulation) shares.

/// Gradients the backward adds into (like q, k, v).
template <class T>
struct Grads {
  std::vector<T> dq, dk, dv;
};

template <class T>
Grads<T> random_grads(const Problem& p, std::uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](index_t heads) {
    std::vector<T> x(static_cast<std::size_t>(p.batch * p.seq * heads * p.dim));
    for (T& e : x) e = static_cast<T>(rng.normal());
    return x;
  };
  return {draw(p.heads), draw(p.kv_heads), draw(p.kv_heads)};
}

template <class T>
struct DeviceRun {
  std::vector<T> o, lse;
  Grads<T> grads;
  AttentionStats forward, backward;
};

// FusedAttention<Cuda> forward, then backward from its o and lse, gradients added into `initial`;
// with `keep`, the forward leaves its state for the backward (kernels::AttentionSaved), as the op does.
template <class T>
DeviceRun<T> run_on_device(const Problem& p, const Inputs& in, const Grads<T>& initial,
                           MatmulPrecision products = MatmulPrecision::fp32, bool keep = false) {
  using Kernel = kernels::FusedAttention<Cuda>;
  auto upload = [](index_t b, index_t s, index_t h, index_t d, const std::vector<float>& x) {
    std::vector<T> cast(x.begin(), x.end());
    return Tensor<T, Cuda>::from_host(Shape{b, s, h, d}, cast);
  };
  const Shape qs{p.batch, p.seq, p.heads, p.dim}, ks{p.batch, p.seq, p.kv_heads, p.dim};
  const auto docs = DocumentLayout<Cuda>::from_spans(p.batch, p.seq, p.spans);
  kernels::AttentionParams params =
      kernels::attention_params("bf16 attention test", qs, ks, ks, docs,
                                AttentionOptions{.scale = p.scale, .softcap = p.softcap, .window = p.window});
  params.products = products;
  const auto q = upload(p.batch, p.seq, p.heads, p.dim, in.q), grad_o = upload(p.batch, p.seq, p.heads, p.dim, in.grad_o);
  const auto k = upload(p.batch, p.seq, p.kv_heads, p.dim, in.k), v = upload(p.batch, p.seq, p.kv_heads, p.dim, in.v);
  // NaN where the forward must write (every row when the spans cover every token, has_padding)
  Tensor<T, Cuda> o(qs), lse(Shape{p.batch, p.seq, p.heads});
  o.fill(std::numeric_limits<T>::quiet_NaN());
  lse.fill(std::numeric_limits<T>::quiet_NaN());
  auto dq = Tensor<T, Cuda>::from_host(qs, initial.dq), dk = Tensor<T, Cuda>::from_host(ks, initial.dk),
       dv = Tensor<T, Cuda>::from_host(ks, initial.dv);
  DeviceRun<T> r;
  kernels::AttentionSaved saved;
  r.forward = Kernel::forward<T>(params, docs, {q.data(), k.data(), v.data(), o.data(), lse.data(), keep ? &saved : nullptr});
  if (keep && products == MatmulPrecision::bf16 && std::is_same_v<T, float> && !saved.state)
    throw std::runtime_error("the bf16 forward kept nothing for its backward (kernels::AttentionSaved)");
  r.backward = Kernel::backward<T>(params, docs, {q.data(), k.data(), v.data(), o.data(), lse.data(), grad_o.data(),
                                                  dq.data(), dk.data(), dv.data(), keep ? &saved : nullptr});
  r.o = o.to_host();
  r.lse = lse.to_host();
  r.grads = {dq.to_host(), dk.to_host(), dv.to_host()};
  return r;
}

template <class T>
bool bitwise_equal(const DeviceRun<T>& a, const DeviceRun<T>& b) {
  auto same = [](const std::vector<T>& x, const std::vector<T>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
  };
  return same(a.o, b.o) && same(a.lse, b.lse) && same(a.grads.dq, b.grads.dq) && same(a.grads.dk, b.grads.dk) &&
         same(a.grads.dv, b.grads.dv);
}

inline std::vector<double> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<double> d(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) d[i] = static_cast<double>(after[i]) - before[i];
  return d;
}

// Padding tokens: o = 0 and lse = -inf exactly, gradients bitwise their initial values.
inline std::string check_padding(const Problem& p, const DeviceRun<float>& r, const Grads<float>& initial) {
  const std::vector<bool> pad = padding_tokens(p);
  const std::size_t d = static_cast<std::size_t>(p.dim);
  for (std::size_t t = 0; t < pad.size(); ++t) {
    if (!pad[t]) continue;
    for (std::size_t h = 0; h < static_cast<std::size_t>(p.heads); ++h) {
      const std::size_t row = t * static_cast<std::size_t>(p.heads) + h;
      if (r.lse[row] != -std::numeric_limits<float>::infinity()) return "padding token " + std::to_string(t) + ": lse is not -inf";
      for (std::size_t e = 0; e < d; ++e)
        if (r.o[row * d + e] != 0.0f || std::memcmp(&r.grads.dq[row * d + e], &initial.dq[row * d + e], 4) != 0)
          return "padding token " + std::to_string(t) + ": o is not 0 or dq changed";
    }
    for (std::size_t e = t * static_cast<std::size_t>(p.kv_heads) * d; e < (t + 1) * static_cast<std::size_t>(p.kv_heads) * d; ++e)
      if (std::memcmp(&r.grads.dk[e], &initial.dk[e], 4) != 0 || std::memcmp(&r.grads.dv[e], &initial.dv[e], 4) != 0)
        return "padding token " + std::to_string(t) + ": dk or dv changed";
  }
  return "";
}

/// One case inside CudaBf16Attention against the double reference on bf16-rounded inputs.
inline std::string check_problem(const Problem& p, std::uint64_t seed) {
  const Inputs raw = make_inputs(p, seed), in = rounded(raw);
  const Grads<float> initial = random_grads<float>(p, seed + 1);
  DeviceRun<float> got, again, kept;
  {
    const CudaBf16Attention on(true);
    got = run_on_device<float>(p, raw, initial);
    again = run_on_device<float>(p, raw, initial);
    kept = run_on_device<float>(p, raw, initial, MatmulPrecision::bf16, /*keep=*/true);
  }
  if (got.forward.q_rows != cuda::flash::tensor_core::kTileRows || got.backward.tile_k != cuda::flash::tensor_core::kKeyStep)
    return "the tensor-core kernels did not run (stats q_rows " + std::to_string(got.forward.q_rows) + ", tile_k " +
           std::to_string(got.backward.tile_k) + ")";
  const Forward f = reference_forward(p, in, false);
  const Gradients g = reference_backward(p, in, got.o, got.lse, false);
  const double e_o = normwise_error(got.o, f.o), e_lse = normwise_error(got.lse, f.lse);
  const double e_dq = normwise_error(added(got.grads.dq, initial.dq), g.dq);
  const double e_dk = normwise_error(added(got.grads.dk, initial.dk), g.dk);
  const double e_dv = normwise_error(added(got.grads.dv, initial.dv), g.dv);
  if (e_o > kOutputTolerance || e_lse > kLseTolerance || e_dq > kGradientTolerance || e_dk > kGradientTolerance ||
      e_dv > kGradientTolerance)
    return "errors relative to each tensor's largest element: o " + std::to_string(e_o) + ", lse " + std::to_string(e_lse) +
           ", dq " + std::to_string(e_dq) + ", dk " + std::to_string(e_dk) + ", dv " + std::to_string(e_dv) +
           " (tolerances o " + std::to_string(kOutputTolerance) + ", lse " + std::to_string(kLseTolerance) + ", grads " +
           std::to_string(kGradientTolerance) + ")";
  if (std::string why = check_padding(p, got, initial); !why.empty()) return why;
  if (!bitwise_equal(got, again)) return "not reproducible run to run";
  if (!bitwise_equal(got, kept)) return "the backward from the forward's kept bf16 copies differs from one that made its own";
  return "";
}

/// The scope is an option, not a state: fp32 before it, after it and under a nested scope that
/// turns it off give the same bits; the bf16 results differ (the tensor cores ran). double and
/// head_dim 160 are fp32 inside the scope too, bit for bit.
inline std::string check_scope_restores_fp32() {
  const Problem p = problems()[1];
  const Inputs raw = make_inputs(p, 31);
  const Grads<float> initial = random_grads<float>(p, 32);
  const DeviceRun<float> before = run_on_device<float>(p, raw, initial);
  DeviceRun<float> inside, nested_off;
  {
    const CudaBf16Attention on(true);
    inside = run_on_device<float>(p, raw, initial);
    {
      const CudaBf16Attention off(false);
      nested_off = run_on_device<float>(p, raw, initial);
    }
  }
  const DeviceRun<float> after = run_on_device<float>(p, raw, initial);
  if (!bitwise_equal(before, after)) return "the fp32 results changed after the scope ended";
  if (!bitwise_equal(before, nested_off)) return "a nested CudaBf16Attention(false) did not give the fp32 results";
  if (inside.o == before.o) return "the scope changed nothing: the tensor-core kernels did not run";
  const Grads<double> initial_double = random_grads<double>(p, 32);
  const DeviceRun<double> double_before = run_on_device<double>(p, raw, initial_double);
  Problem wide = problems()[0];
  wide.dim = 160;
  const Inputs wide_raw = make_inputs(wide, 33);
  const Grads<float> wide_initial = random_grads<float>(wide, 34);
  const DeviceRun<float> wide_before = run_on_device<float>(wide, wide_raw, wide_initial);
  const CudaBf16Attention on(true);
  if (!bitwise_equal(double_before, run_on_device<double>(p, raw, initial_double)))
    return "double attention changed inside the scope (it must stay fp64)";
  if (!bitwise_equal(wide_before, run_on_device<float>(wide, wide_raw, wide_initial)))
    return "head_dim 160 changed inside the scope (above the tensor-core kernels' 128 it must stay fp32)";
  return "";
}

/// The op asks for bf16 products under a Bf16Mixed model (MatmulPrecision::bf16 when it is
/// created) and the CUDA kernel honours it without any scope: the same bits as inside
/// CudaBf16Attention(true), and the stats say bf16 ran; a CudaBf16Attention(false) scope forces the
/// fp32 kernels back, bit for bit. Through flash_attention, a backward run after the precision
/// scope closed still runs in bf16 (the op kept its params): every gradient bitwise the kernel's.
inline std::string check_products_follow_the_op() {
  const Problem p = problems()[1];
  const Inputs raw = make_inputs(p, 41);
  const Grads<float> zero{std::vector<float>(raw.q.size()), std::vector<float>(raw.k.size()), std::vector<float>(raw.v.size())};
  const DeviceRun<float> fp32 = run_on_device<float>(p, raw, zero);
  const DeviceRun<float> asked = run_on_device<float>(p, raw, zero, MatmulPrecision::bf16);
  DeviceRun<float> scoped, forced_off;
  {
    const CudaBf16Attention on(true);
    scoped = run_on_device<float>(p, raw, zero);
  }
  {
    const CudaBf16Attention off(false);
    forced_off = run_on_device<float>(p, raw, zero, MatmulPrecision::bf16);
  }
  if (asked.forward.products != MatmulPrecision::bf16 || asked.backward.products != MatmulPrecision::bf16)
    return "AttentionParams::products = bf16 did not run the tensor-core kernels (stats say fp32)";
  if (fp32.forward.products != MatmulPrecision::fp32) return "fp32 params report bf16 products";
  if (!bitwise_equal(asked, scoped)) return "products = bf16 differs from CudaBf16Attention(true)";
  if (!bitwise_equal(forced_off, fp32)) return "CudaBf16Attention(false) did not force the fp32 kernels";
  // Through the op: forward inside a bf16 scope, backward after it closed.
  const Shape qs{p.batch, p.seq, p.heads, p.dim}, ks{p.batch, p.seq, p.kv_heads, p.dim};
  const auto docs = DocumentLayout<Cuda>::from_spans(p.batch, p.seq, p.spans);
  Var<float, Cuda> q(Tensor<float, Cuda>::from_host(qs, raw.q), true), k(Tensor<float, Cuda>::from_host(ks, raw.k), true),
      v(Tensor<float, Cuda>::from_host(ks, raw.v), true);
  AttentionStats stats;
  Var<float, Cuda> o;
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    o = flash_attention(q, k, v, docs, AttentionOptions{.scale = p.scale, .softcap = p.softcap, .window = p.window}, &stats);
  }
  backward(o, Tensor<float, Cuda>::from_host(qs, raw.grad_o));
  const DeviceRun<float> op{o.value().to_host(), asked.lse, {q.grad().to_host(), k.grad().to_host(), v.grad().to_host()}, stats, {}};
  if (stats.products != MatmulPrecision::bf16) return "flash_attention under a bf16 scope did not ask for bf16 products";
  if (!bitwise_equal(op, asked)) return "flash_attention's backward after the scope closed did not run as its forward (bf16)";
  return "";
}

}  // namespace megacpp::attention_bf16_test
