// CPU backend: strided batched GEMM on bf16 operands with fp32 sums and an fp32 C
// (Cpu::gemm_bf16), and the choice of the kernel that runs it.
//
// Two paths, chosen once per process (bf16_gemm_path()):
//   avx512_bf16    the packed VDPBF16PS kernel (gemm_bf16_kernel.hpp), threaded like the fp32
//                  GEMM (gemm.hpp: gemm_batched). Needs a CPU with AVX512-BF16 and AVX512-BW.
//   fp32_fallback  convert A and B to fp32 and run the fp32 GEMM: correct everywhere, no faster
//                  than fp32 (the reference the fast path is tested against).
//
// How the path is chosen: the CPU is asked through CPUID (__builtin_cpu_supports) the first time
// a bf16 GEMM runs, and the kernel's functions are compiled with a target attribute, so one
// binary built with the project's ordinary flags runs on CPUs with and without the instruction.
// When -march already enables AVX512-BF16 the compiler may use it anywhere in the binary, which
// can then only run on such CPUs, so the answer is known at compile time and CPUID is not asked.
// The environment variable MEGACPP_BF16_GEMM overrides the choice: "fp32" forces the fallback
// (tests and benches compare both paths on one machine), "avx512bf16" insists on the fast
// path (an error where the CPU lacks it), "auto" or unset picks the fast path where it can run.
// AMX (AMX-BF16 tiles) has no path yet: see gemm_bf16_kernel.hpp.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "megacpp/backends/cpu/detail/elementwise.hpp"
#include "megacpp/backends/cpu/detail/gemm.hpp"
#include "megacpp/backends/cpu/detail/gemm_bf16_kernel.hpp"
#include "megacpp/core/backend.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp::cpu {

/// The kernel a bf16 GEMM runs on.
enum class Bf16GemmPath { avx512_bf16, fp32_fallback };

/// "avx512_bf16" or "fp32_fallback": the name benches print.
inline std::string_view bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::avx512_bf16 ? "avx512_bf16" : "fp32_fallback";
}

/// True when this CPU (and this build) can run the VDPBF16PS kernel.
inline bool cpu_has_avx512_bf16() {
#if MEGACPP_HAS_AVX512_BF16_KERNEL
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  return true;  // -march enabled it: the binary already requires it (see the file comment)
#else
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#endif
#else
  return false;
#endif
}

/// The path for a CPU with (or without) AVX512-BF16 under MEGACPP_BF16_GEMM = `setting` (null:
/// unset). Throws megacpp::Error for an unknown setting, or "avx512bf16" on a CPU without it.
inline Bf16GemmPath choose_bf16_gemm_path(bool cpu_has_bf16, const char* setting) {
  const std::string_view s = setting ? setting : "";
  if (s.empty() || s == "auto") return cpu_has_bf16 ? Bf16GemmPath::avx512_bf16 : Bf16GemmPath::fp32_fallback;
  if (s == "fp32") return Bf16GemmPath::fp32_fallback;
  if (s == "avx512bf16") {
    check(cpu_has_bf16, "gemm_bf16", "MEGACPP_BF16_GEMM=avx512bf16 but this CPU (or build) has no AVX512-BF16 "
                                     "(unset it or use auto to fall back to fp32)");
    return Bf16GemmPath::avx512_bf16;
  }
  fail("gemm_bf16", "MEGACPP_BF16_GEMM is '", s, "'; expected auto, fp32 or avx512bf16");
}

/// The process's path: chosen on the first call from the CPU and MEGACPP_BF16_GEMM, then fixed.
inline Bf16GemmPath bf16_gemm_path() {
  static const Bf16GemmPath path = choose_bf16_gemm_path(cpu_has_avx512_bf16(), std::getenv("MEGACPP_BF16_GEMM"));
  return path;
}

// Elements from the first to the last one a strided batch of (rows, cols) matrices with row
// stride ld and batch stride `stride` touches.
inline index_t strided_extent(index_t batch, index_t stride, index_t rows, index_t cols, index_t ld) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// The fallback: A and B converted to fp32 (same layout and strides), then the fp32 GEMM (k > 0).
inline void gemm_bf16_fallback(const GemmArgs& g, float alpha, const bf16* A, const bf16* B, float beta, float* C) {
  const index_t a_size = strided_extent(g.batch, g.stride_a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda);
  const index_t b_size = strided_extent(g.batch, g.stride_b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb);
  const auto a32 = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(a_size));
  const auto b32 = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(b_size));
  convert<bf16, float>(static_cast<std::size_t>(a_size), A, a32.get());
  convert<bf16, float>(static_cast<std::size_t>(b_size), B, b32.get());
  gemm<float>(g, alpha, a32.get(), b32.get(), beta, C);
}

// C_b = alpha op(A_b) op(B_b) + beta C_b (GemmArgs) with bf16 A, B and fp32 sums and C, on the
// given path.
inline void gemm_bf16(const GemmArgs& g, float alpha, const bf16* A, const bf16* B, float beta, float* C,
                      Bf16GemmPath path) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.k == 0) {  // empty inner product: C = beta C (A and B are not read, and may be null)
    for (index_t b = 0; b < g.batch; ++b)
      for (index_t i = 0; i < g.m; ++i)
        for (index_t j = 0; j < g.n; ++j) {
          float& c = C[b * g.stride_c + i * g.ldc + j];
          c = beta == 0.0f ? 0.0f : beta * c;
        }
    return;
  }
#if MEGACPP_HAS_AVX512_BF16_KERNEL
  if (path == Bf16GemmPath::avx512_bf16) {
    check(cpu_has_avx512_bf16(), "gemm_bf16", "the avx512_bf16 path was asked for on a CPU without AVX512-BF16");
    using Tile = bf16_gemm::Tiling;
    gemm_batched(g, Tile::MR, Tile::NR, A, B, C, [&](const GemmArgs& part, const bf16* a, const bf16* b, float* c) {
      bf16_gemm::gemm(part, alpha, a, b, beta, c);
    });
    return;
  }
#endif
  check(path == Bf16GemmPath::fp32_fallback, "gemm_bf16", "the ", bf16_gemm_path_name(path),
        " path is not compiled into this build");
  gemm_bf16_fallback(g, alpha, A, B, beta, C);
}

}  // namespace megacpp::cpu
