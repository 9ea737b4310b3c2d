/// \file
/// megacpp/backends/cpu.hpp: the CPU backend: its own packed GEMM on Eigen's SIMD packets, OpenMP
/// loops, and (megacpp/backends/cpu/kernels.hpp, included at the end) every fused kernel.
///
/// `Cpu` satisfies the `Backend` concept (megacpp/core/backend.hpp); each member forwards to a
/// kernel in megacpp/backends/cpu/detail/. Memory is host memory, so Tensor<T, Cpu>::data() can
/// be read directly. The backend includes core only: it knows nothing of Vars or layers.
#pragma once

#define MEGACPP_CPU_BACKEND_INTERNAL
#include "megacpp/backends/cpu/detail/elementwise.hpp"
#include "megacpp/backends/cpu/detail/gemm.hpp"
#include "megacpp/backends/cpu/detail/gemm_bf16.hpp"
#include "megacpp/backends/cpu/detail/indexing.hpp"
#include "megacpp/backends/cpu/detail/memory.hpp"
#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/backends/cpu/detail/rows.hpp"
#undef MEGACPP_CPU_BACKEND_INTERNAL

#include <cstring>

#include "megacpp/core.hpp"

namespace megacpp {

/// The CPU backend: the `Backend` contract on host memory, GEMM on the backend's own packed kernel,
/// every other kernel an OpenMP loop. Each member forwards to megacpp/backends/cpu/detail/, whose naive loops are
/// the reference the other backends are tested against.
struct Cpu {
  static constexpr std::string_view name = "cpu";  ///< backend name in logs and bench output
  static constexpr bool host_accessible = true;  ///< data() is dereferenceable on the host

  // --- memory ---
  /// Uninitialised storage for n elements (64-byte aligned; counted in memory_stats()).
  template <class T> static T* allocate(std::size_t n) { return cpu::allocate<T>(n); }
  /// Frees storage from allocate(n).
  template <class T> static void deallocate(T* p, std::size_t n) { cpu::deallocate<T>(p, n); }
  /// Copies n elements from host memory.
  template <class T> static void copy_from_host(T* dst, const T* src, std::size_t n) { std::memcpy(dst, src, n * sizeof(T)); }
  /// Copies n elements to host memory.
  template <class T> static void copy_to_host(T* dst, const T* src, std::size_t n) { std::memcpy(dst, src, n * sizeof(T)); }
  /// Copies n elements within the backend.
  template <class T> static void copy(T* dst, const T* src, std::size_t n) { std::memcpy(dst, src, n * sizeof(T)); }
  /// Sets n elements to value.
  template <class T> static void fill(T* dst, std::size_t n, T value) { cpu::fill<T>(dst, n, value); }
  /// Converts n elements between storage types (round to nearest even into bf16/f16).
  template <class From, class To> static void convert(std::size_t n, const From* src, To* dst) { cpu::convert<From, To>(n, src, dst); }
  /// Bytes allocated now and at peak.
  static MemoryStats memory_stats() { return cpu::memory_stats(); }
  /// Restarts the peak at the current allocation.
  static void reset_peak_memory() { cpu::reset_peak_memory(); }
  /// Bytes of freed blocks kept for reuse (not counted in memory_stats()). Live + cached bytes
  /// stay under the high-water mark of live bytes; MEGACPP_CPU_CACHE_MB caps the cache (0 = none).
  static std::size_t cached_bytes() { return cpu::cached_bytes(); }
  /// Returns every cached block to the system.
  static void empty_cache() { cpu::empty_cache(); }
  /// No-op: CPU kernels are synchronous.
  static void synchronize() {}

  // --- dense algebra ---
  /// Strided batched GEMM (GemmArgs) on the packed register-tiled kernel (detail/gemm_kernel.hpp).
  template <class T>
  static void gemm(const GemmArgs& g, T alpha, const T* a, const T* b, T beta, T* c) { cpu::gemm<T>(g, alpha, a, b, beta, c); }
  /// The same GEMM on bf16 A and B with fp32 sums into fp32 C: the VDPBF16PS kernel where the CPU
  /// has AVX512-BF16, else conversion to fp32 (cpu::bf16_gemm_path(), detail/gemm_bf16.hpp).
  static void gemm_bf16(const GemmArgs& g, float alpha, const bf16* a, const bf16* b, float beta, float* c) {
    cpu::gemm_bf16(g, alpha, a, b, beta, c, cpu::bf16_gemm_path());
  }

  // --- elementwise, reductions, layout ---
  /// out[r, c] = f(ins[r, c]...) over a (rows, cols) grid; broadcast operands index by c only.
  template <class T, class F, class... Ins>
  static void map(index_t rows, index_t cols, F f, T* out, Ins... ins) { cpu::map<T>(rows, cols, f, out, ins...); }
  /// out[i] = bf16(f(ins[i]...)) for i < n, rounded as convert rounds (a product's bf16 operand
  /// made in the pass that computes it: the same bits as map then convert).
  template <class T, class F, class... Ins>
  static void map_to_bf16(index_t n, F f, bf16* out, const Ins*... ins) { cpu::map_to_bf16<T>(n, f, out, ins...); }
  /// f(a[i], b[i], c[i], x[i]) for i < n, updating a, b, c in place (an optimiser step in one pass);
  /// with `a_rounded`, also a_rounded[i] = bf16(a[i]) after the update (the weight's bf16 copy).
  template <class T, class F>
  static void update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded = nullptr) {
    cpu::update_in_place<T>(n, f, a, b, c, x, a_rounded);
  }
  /// f(a[i], x[i]) for i < n, updating a in place (Muon's weight update); a_rounded as above.
  template <class T, class F>
  static void update_in_place(index_t n, F f, T* a, const T* x, bf16* a_rounded = nullptr) {
    cpu::update_in_place<T>(n, f, a, x, a_rounded);
  }
  /// out[o, i] = beta * out[o, i] + scale * sum_j f(ins[o, j, i]...), x viewed as (outer, n, inner);
  /// each output summed by one thread in a fixed order (deterministic).
  template <class T, class F, class... Ins>
  static void reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
    cpu::reduce<T>(outer, n, inner, f, scale, beta, out, ins...);
  }
  /// dst[o, j, i] = beta * dst[o, j, i] + scale * src[o, i]: the adjoint of reduce (broadcast back).
  template <class T>
  static void expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
    cpu::expand<T>(outer, n, inner, scale, src, beta, dst);
  }
  /// Copies a (rows, cols) block between row strides src_ld and dst_ld, dst = beta * dst + src.
  template <class T>
  static void copy_2d(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld) {
    cpu::copy_2d<T>(rows, cols, src, src_ld, beta, dst, dst_ld);
  }
  /// Swaps axes d0 and d1 of src viewed as (outer, d0, mid, d1, inner), dst = beta * dst + result.
  template <class T>
  static void transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta, T* dst) {
    cpu::transpose<T>(outer, d0, mid, d1, inner, src, beta, dst);
  }
  /// Smallest and largest of n ids: how ops validate indices at the API boundary.
  static std::pair<std::int32_t, std::int32_t> minmax_index(index_t n, const std::int32_t* idx) { return cpu::minmax_index(n, idx); }

  // --- fused row kernels ---
  /// Row softmax of x (rows, cols); an all -inf row gives zeros.
  template <class T> static void softmax(index_t rows, index_t cols, const T* x, T* y) { cpu::softmax<T>(rows, cols, x, y); }
  /// gx += y * (gy - sum(gy * y)) per row.
  template <class T> static void softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) { cpu::softmax_backward<T>(rows, cols, y, gy, gx); }
  /// Row log-softmax of x (rows, cols).
  template <class T> static void log_softmax(index_t rows, index_t cols, const T* x, T* y) { cpu::log_softmax<T>(rows, cols, x, y); }
  /// gx += gy - exp(y) * sum(gy) per row.
  template <class T> static void log_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) { cpu::log_softmax_backward<T>(rows, cols, y, gy, gx); }
  /// y = x * rstd * gain per row (gain may be null), rstd = 1 / sqrt(mean(x^2) + eps) saved per row.
  template <class T>
  static void rmsnorm(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) { cpu::rmsnorm<T>(rows, cols, x, gain, eps, y, rstd); }
  /// Adds the RMSNorm gradients into gx and ggain (either may be null).
  template <class T>
  static void rmsnorm_backward(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd, const T* gy, T* gx, T* ggain) {
    cpu::rmsnorm_backward<T>(rows, cols, x, gain, rstd, gy, gx, ggain);
  }
  /// out[i] = table[idx[i]] for n rows of width dim.
  template <class T>
  static void gather_rows(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out) { cpu::gather_rows<T>(n, dim, table, idx, out); }
  /// gtable[idx[i]] += gout[i], in a fixed order (deterministic for repeated ids).
  template <class T>
  static void scatter_add_rows(index_t n, index_t dim, const T* gout, const std::int32_t* idx, T* gtable) { cpu::scatter_add_rows<T>(n, dim, gout, idx, gtable); }
  /// Rotate-half RoPE of x (tokens, heads, dim) by positions * inv_freq; sign -1 rotates back
  /// (the backward); y = beta * y + result.
  template <class T>
  static void rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq, int sign, const T* x, T beta, T* y) {
    cpu::rope<T>(tokens, heads, dim, positions, inv_freq, sign, x, beta, y);
  }
  /// Per-row loss logsumexp(z) - z[target] (times mask when given) and the row's log-sum-exp.
  template <class T>
  static void cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets, const T* mask, T* losses, T* lse) {
    cpu::cross_entropy<T>(rows, vocab, logits, targets, mask, losses, lse);
  }
  /// glogits += scale * mask * (softmax(z) - onehot(target)) per row, from the saved log-sum-exp.
  template <class T>
  static void cross_entropy_backward(index_t rows, index_t vocab, const T* logits, const T* lse, const std::int32_t* targets, const T* mask, T scale, T* glogits) {
    cpu::cross_entropy_backward<T>(rows, vocab, logits, lse, targets, mask, scale, glogits);
  }
};

static_assert(Backend<Cpu>, "megacpp_cpu_backend_must_satisfy_Backend: see megacpp/core/backend.hpp");

/// A tensor on the CPU backend.
template <class T>
using CpuTensor = Tensor<T, Cpu>;

}  // namespace megacpp

// The fused kernels (specialisations of the contracts in megacpp/core/kernels/).
#include "megacpp/backends/cpu/kernels.hpp"
