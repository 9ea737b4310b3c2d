// megacpp/backends/cuda.cuh: the CUDA backend, cuBLAS GEMM + hand-written kernels.
//
// `Cuda` satisfies the `Backend` concept (megacpp/core/backend.hpp) with the same semantics as
// `Cpu` (megacpp/backends/cpu.hpp and its detail/ headers are the reference for every kernel);
// each member forwards to a kernel in megacpp/backends/cuda/detail/. Memory is device memory:
// Tensor<T, Cuda>::data() is a device pointer, read on the host through to_host()/item().
//
// Every kernel, cuBLAS call and device-to-device copy runs on the default stream, so calls are
// ordered exactly like the CPU backend's synchronous ones; copy_to_host and synchronize wait for
// the device. Kernels are deterministic: no floating-point atomics, fixed reduction orders.
// Errors from CUDA or cuBLAS throw megacpp::Error("cuda", ...) naming the call and file:line.
//
// Compile with nvcc (C++20). Functors are plain structs with MEGACPP_HD call operators, so
// neither --extended-lambda nor --expt-relaxed-constexpr is required.
#pragma once

#if !defined(__CUDACC__)
#error "megacpp/backends/cuda.cuh needs nvcc: compile this translation unit as CUDA (a .cu file, or set_source_files_properties(... LANGUAGE CUDA))"
#endif

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/elementwise_launch.cuh"
#include "megacpp/backends/cuda/detail/expert_routing.cuh"
#include "megacpp/backends/cuda/detail/gated_combine_launch.cuh"
#include "megacpp/backends/cuda/detail/gemm.cuh"
#include "megacpp/backends/cuda/detail/grouped_gemm_launch.cuh"
#include "megacpp/backends/cuda/detail/indexing_launch.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/backends/cuda/detail/reduce_launch.cuh"
#include "megacpp/backends/cuda/detail/rows_launch.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core.hpp"

namespace megacpp {

struct Cuda {
  static constexpr std::string_view name = "cuda";
  static constexpr bool host_accessible = false;  // data() is a device pointer

  // True when a CUDA device can be used; false (never an exception) without a driver or GPU.
  static bool device_available() { return cuda::device_available(); }
  // The current device's name and memory (run logs).
  static std::string device_name() { return cuda::device_name(); }

  // --- memory ---
  template <class T> static T* allocate(std::size_t n) { return cuda::allocate<T>(n); }
  template <class T> static void deallocate(T* p, std::size_t n) { cuda::deallocate<T>(p, n); }
  template <class T> static void copy_from_host(T* dst, const T* src, std::size_t n) { cuda::copy_from_host<T>(dst, src, n); }
  template <class T> static void copy_to_host(T* dst, const T* src, std::size_t n) { cuda::copy_to_host<T>(dst, src, n); }
  template <class T> static void copy(T* dst, const T* src, std::size_t n) { cuda::copy<T>(dst, src, n); }
  template <class T> static void fill(T* dst, std::size_t n, T value) { cuda::fill<T>(dst, n, value); }
  template <class From, class To> static void convert(std::size_t n, const From* src, To* dst) { cuda::convert<From, To>(n, src, dst); }
  static MemoryStats memory_stats() { return cuda::memory_stats(); }
  static void reset_peak_memory() { cuda::reset_peak_memory(); }
  // Returns the cached free device blocks to the driver (allocations reuse freed blocks: memory.cuh),
  // and the pinned staging blocks whose copies have completed.
  static void empty_cache() { cuda::empty_cache(); }
  static void synchronize() { cuda::synchronize(); }
  // Page-locked host memory held for staging uploads (memory.cuh; grows only while a step's
  // uploads find no free block, up to kPinnedStagingLimit).
  static std::size_t pinned_staging_bytes() { return cuda::pinned_staging().pinned_bytes(); }
  // How many times the backend has made the host wait for the GPU in this process (check.cuh).
  static std::uint64_t host_waits() { return cuda::host_wait_count().load(std::memory_order_relaxed); }
  // The waits made while f() runs (tests and benches: how many a step or a decode makes).
  template <class F> static std::uint64_t host_waits_during(F&& f) {
    const std::uint64_t before = host_waits();
    f();
    return host_waits() - before;
  }

  // --- dense algebra ---
  template <class T>
  static void gemm(const GemmArgs& g, T alpha, const T* a, const T* b, T beta, T* c) { cuda::gemm<T>(g, alpha, a, b, beta, c); }
  // bf16 A and B, fp32 sums and C (cuBLAS GemmEx on the tensor cores).
  static void gemm_bf16(const GemmArgs& g, float alpha, const bf16* a, const bf16* b, float beta, float* c) {
    cuda::gemm_bf16(g, alpha, a, b, beta, c);
  }

  // --- elementwise, reductions, layout ---
  template <class T, class F, class... Ins>
  static void map(index_t rows, index_t cols, F f, T* out, Ins... ins) { cuda::map<T>(rows, cols, f, out, ins...); }
  template <class T, class F, class... Ins>
  static void map_to_bf16(index_t n, F f, bf16* out, const Ins*... ins) { cuda::map_to_bf16<T>(n, f, out, ins...); }
  template <class T, class F>
  static void update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded = nullptr) {
    cuda::update_in_place<T>(n, f, a, b, c, x, a_rounded);
  }
  template <class T, class F>
  static void update_in_place(index_t n, F f, T* a, const T* x, bf16* a_rounded = nullptr) {
    cuda::update_in_place<T>(n, f, a, x, a_rounded);
  }
  template <class T, class F, class... Ins>
  static void reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
    cuda::reduce<T>(outer, n, inner, f, scale, beta, out, ins...);
  }
  template <class T>
  static void expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
    cuda::expand<T>(outer, n, inner, scale, src, beta, dst);
  }
  template <class T>
  static void copy_2d(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld) {
    cuda::copy_2d<T>(rows, cols, src, src_ld, beta, dst, dst_ld);
  }
  template <class T>
  static void transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta, T* dst) {
    cuda::transpose<T>(outer, d0, mid, d1, inner, src, beta, dst);
  }
  static std::pair<std::int32_t, std::int32_t> minmax_index(index_t n, const std::int32_t* idx) { return cuda::minmax_index(n, idx); }

  // --- fused row kernels ---
  template <class T> static void softmax(index_t rows, index_t cols, const T* x, T* y) { cuda::softmax<T>(rows, cols, x, y); }
  template <class T> static void softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) { cuda::softmax_backward<T>(rows, cols, y, gy, gx); }
  template <class T> static void log_softmax(index_t rows, index_t cols, const T* x, T* y) { cuda::log_softmax<T>(rows, cols, x, y); }
  template <class T> static void log_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) { cuda::log_softmax_backward<T>(rows, cols, y, gy, gx); }
  template <class T>
  static void rmsnorm(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) { cuda::rmsnorm<T>(rows, cols, x, gain, eps, y, rstd); }
  template <class T>
  static void rmsnorm_backward(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd, const T* gy, T* gx, T* ggain) {
    cuda::rmsnorm_backward<T>(rows, cols, x, gain, rstd, gy, gx, ggain);
  }
  template <class T>
  static void gather_rows(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out) { cuda::gather_rows<T>(n, dim, table, idx, out); }
  template <class T>
  static void scatter_add_rows(index_t n, index_t dim, const T* gout, const std::int32_t* idx, T* gtable) { cuda::scatter_add_rows<T>(n, dim, gout, idx, gtable); }
  template <class T>
  static void rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq, int sign, const T* x, T beta, T* y) {
    cuda::rope<T>(tokens, heads, dim, positions, inv_freq, sign, x, beta, y);
  }
  template <class T>
  static void cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets, const T* mask, T* losses, T* lse) {
    cuda::cross_entropy<T>(rows, vocab, logits, targets, mask, losses, lse);
  }
  template <class T>
  static void cross_entropy_backward(index_t rows, index_t vocab, const T* logits, const T* lse, const std::int32_t* targets, const T* mask, T scale, T* glogits) {
    cuda::cross_entropy_backward<T>(rows, vocab, logits, lse, targets, mask, scale, glogits);
  }
};

static_assert(Backend<Cuda>, "megacpp_cuda_backend_must_satisfy_Backend: see megacpp/core/backend.hpp");

template <class T>
using CudaTensor = Tensor<T, Cuda>;

/// While alive, float GEMMs on this thread use TF32 tensor-core products (detail/gemm.cuh).
using CudaTf32Products = cuda::Tf32Products;

}  // namespace megacpp

namespace megacpp::kernels {

// The fused kernels CUDA implements (contracts: megacpp/core/kernels/): those below, and each of
// megacpp/backends/cuda/kernels/*.cuh, included at the end of this file.

/// The LM head's fused loss rows on the GPU (one block per row).
template <>
struct SoftcapCrossEntropy<Cuda> {
  static constexpr bool available = true;
  template <class T>
  static void forward(const SoftcapCrossEntropyParams& p, const SoftcapCrossEntropyArgs<T>& a) {
    cuda::softcap_cross_entropy<T>(p.rows, p.vocab, static_cast<T>(p.cap), a.logits, a.targets, a.mask,
                                   static_cast<T>(p.scale), a.losses, a.lse, a.grad);
  }
};

/// The MoE experts' grouped product as one cuBLAS GEMM per non-empty group, issued in order on
/// the backend's stream (the groups' sizes are host data); the fp32 path run against the CPU on an
/// H100 (tests/cuda). bf16 operands (Operand = bf16, T = float) go through cuda::gemm_bf16, the
/// dense products' cublasGemmStridedBatchedEx on the tensor cores with fp32 sums (not yet run on a
/// GPU); inside a cuda::moe::OneLaunchGroupedProducts scope (off by default), each of their
/// products is instead one launch over every group where grouped_product_fits
/// (detail/grouped_gemm.cuh: DeepGEMM's contiguous layout, mma.sync tiles; tested on the host
/// emulation only).
template <>
struct GroupedGemm<Cuda> {
  static constexpr bool available = true;
  template <class T, class Operand = T>
  static void forward(const GroupedGemmParams& p, const GroupedGemmArgs<T, Operand>& a) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Operand, bf16>) {
      if (cuda::moe::OneLaunchGroupedProducts::enabled() && cuda::moe::grouped_product_fits(p, a.x, a.w, nullptr, a.y)) {
        cuda::moe::grouped_forward_bf16(p, a);
        return;
      }
    }
    for (index_t g = 0; g < p.groups; ++g) {
      const index_t row0 = p.offsets[g], rows = p.offsets[g + 1] - row0;
      if (rows == 0) continue;
      product<T, Operand>(GemmArgs::dense(false, true, rows, p.n, p.k), a.x + row0 * p.k, a.w + g * p.n * p.k, T(0),
                          a.y + row0 * p.n);
    }
  }
  template <class T, class Operand = T>
  static void backward(const GroupedGemmParams& p, const GroupedGemmArgs<T, Operand>& a,
                       const GroupedGemmGrads<T, Operand>& d) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Operand, bf16>) {
      if (cuda::moe::OneLaunchGroupedProducts::enabled() &&
          cuda::moe::grouped_product_fits(p, a.x, a.w, d.dy, d.dx, d.dw)) {
        cuda::moe::grouped_backward_bf16(p, a, d);
        return;
      }
    }
    for (index_t g = 0; g < p.groups; ++g) {
      const index_t row0 = p.offsets[g], rows = p.offsets[g + 1] - row0;
      if (rows == 0) continue;
      if (d.dx)
        product<T, Operand>(GemmArgs::dense(false, false, rows, p.k, p.n), d.dy + row0 * p.n, a.w + g * p.n * p.k, T(1),
                            d.dx + row0 * p.k);
      if (d.dw)
        product<T, Operand>(GemmArgs::dense(true, false, p.n, p.k, rows), d.dy + row0 * p.n, a.x + row0 * p.k, T(1),
                            d.dw + g * p.n * p.k);
    }
  }

 private:
  // C = op(A) op(B) + beta C in T, or on bf16 operands with fp32 sums.
  template <class T, class Operand>
  static void product(const GemmArgs& g, const Operand* a, const Operand* b, T beta, T* c) {
    static_assert(grouped_gemm_operands<T, Operand>, "megacpp_grouped_gemm_operands_are_T_or_bf16_into_float");
    if constexpr (std::is_same_v<T, Operand>) cuda::gemm<T>(g, T(1), a, b, beta, c);
    else cuda::gemm_bf16(g, 1.0f, a, b, beta, c);
  }
};

/// The MoE gated combine: one block per token, slots in order (detail/gated_combine.cuh).
template <>
struct GatedCombine<Cuda> {
  static constexpr bool available = true;
  template <class T>
  static void forward(const GatedCombineParams& p, const GatedCombineArgs<T>& a) {
    cuda::gated_combine_forward<T>(p, a);
  }
  template <class T>
  static void backward(const GatedCombineParams& p, const GatedCombineArgs<T>& a, const GatedCombineGrads<T>& g) {
    cuda::gated_combine_backward<T>(p, a, g);
  }
};

/// The MoE expert routing: a thread per token chooses, CUB sorts, Thrust finds the group offsets
/// (detail/expert_routing.cuh).
template <>
struct ExpertRouting<Cuda> {
  static constexpr bool available = true;
  template <class T>
  static RoutingFault route(const ExpertRoutingParams& p, const ExpertRoutingArgs<T>& a) {
    return cuda::moe::route_experts<T>(p, a);
  }
};

}  // namespace megacpp::kernels

// The document-aware kernels, each in its own header (after `Cuda` is complete).
#include "megacpp/backends/cuda/kernels/attention.cuh"
#include "megacpp/backends/cuda/kernels/attention_decode.cuh"
#include "megacpp/backends/cuda/kernels/causal_conv1d.cuh"
#include "megacpp/backends/cuda/kernels/m2rnn_scan.cuh"
#include "megacpp/backends/cuda/kernels/m2rnn_step.cuh"
#include "megacpp/backends/cuda/kernels/ssm_rotary.cuh"
#include "megacpp/backends/cuda/kernels/ssm_scan.cuh"
#include "megacpp/backends/cuda/kernels/ssm_step.cuh"

namespace megacpp {

/// While alive, float attention (FusedAttention<Cuda>) on this thread runs in bf16 on the tensor
/// cores (true: q, k, v, dO, P and dS rounded to bf16, fp32 sums and softmax statistics, head_dim up
/// to 128, detail/attention_mma.cuh) or in fp32 on the CUDA cores (false), whatever precision the op
/// asked for. Outside every scope the op decides: bf16 under a Bf16Mixed model, fp32 otherwise.
using CudaBf16Attention = cuda::flash::Bf16Attention;

}  // namespace megacpp
