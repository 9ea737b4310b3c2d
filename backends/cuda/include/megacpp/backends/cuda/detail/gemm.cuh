// CUDA backend: strided batched GEMM through cuBLAS (fp32, fp64; TF32 on request; bf16 inputs).
//
// megacpp matrices are row-major, cuBLAS's are column-major. A row-major (r, c) matrix with row
// stride ld is, read column-major, its transpose (c, r) with leading dimension ld. So the
// row-major product C = op(A) op(B) is computed as the column-major product
//   C^T = op(B)^T op(A)^T,
// i.e. cuBLAS with the operands swapped (B first), m and n swapped, and the same trans flags
// and leading dimensions (the standard trick; see e.g. the cuBLAS docs' row-major note).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <type_traits>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/thread_option.cuh"
#include "megacpp/core/backend.hpp"

namespace megacpp::cuda {

// One cuBLAS handle per host thread (a handle must not be used by two threads at once), created
// on first use and destroyed when the thread exits.
class CublasHandle {
 public:
  CublasHandle() = default;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  // The status is ignored: at process exit the driver may already be tearing down, and a
  // destructor has nobody to report to.
  ~CublasHandle() { if (handle_) cublasDestroy(handle_); }

  cublasHandle_t get() {
    if (!handle_) {
      MEGACPP_CUBLAS_CHECK(cublasCreate(&handle_));
      MEGACPP_CUBLAS_CHECK(cublasSetStream(handle_, kStream));
      // Full FP32 products: no TF32 tensor-core rounding (10-bit mantissa inputs), so float
      // GEMMs agree with the CPU backend to float precision.
      MEGACPP_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    }
    return handle_;
  }

 private:
  cublasHandle_t handle_ = nullptr;
};

inline cublasHandle_t cublas_handle() {
  thread_local CublasHandle handle;
  return handle.get();
}

// TF32 products for float GEMMs, off unless asked for (Tf32Products, per host thread): the
// tensor cores round each input to a 10-bit mantissa and sum in fp32 (NVIDIA's TF32; PyTorch's
// allow_tf32 switch), about 8x the H100's fp32 CUDA-core rate, at ~1e-3 relative error per product
// instead of float's 1e-7. An explicit choice, never a default: results then differ from the CPU.
/// While alive, float GEMMs on this host thread run in TF32 on the tensor cores (enabled = true)
/// or in full fp32 (false); the previous choice comes back when it ends.
using Tf32Products = ThreadOption<struct Tf32ProductsTag>;

// C_b = beta * C_b for every matrix of the batch: the k == 0 product (cuBLAS rejects the
// leading dimensions an empty inner dimension produces). beta == 0 overwrites, so
// uninitialised C (NaN bits) becomes 0, as in BLAS.
template <class T>
__global__ void scale_matrices_kernel(index_t batch, index_t m, index_t n, index_t ldc, index_t stride_c, T beta, T* c) {
  const index_t total = batch * m * n;
  for (index_t idx = global_thread(); idx < total; idx += grid_stride()) {
    const index_t col = idx % n, row = (idx / n) % m, b = idx / (m * n);
    T& x = c[b * stride_c + row * ldc + col];
    x = beta == T(0) ? T(0) : beta * x;
  }
}

template <class T>
void gemm_strided(const GemmArgs& g, T alpha, const T* a, const T* b, T beta, T* c) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "megacpp_cuda_gemm_takes_float_or_double: convert bf16/f16 with Cuda::convert first");
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    if (Tf32Products::enabled()) {
      MEGACPP_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(cublas_handle(), op_b, op_a, g.n, g.m, g.k, &alpha, b, CUDA_R_32F,
                                                         g.ldb, g.stride_b, a, CUDA_R_32F, g.lda, g.stride_a, &beta, c,
                                                         CUDA_R_32F, g.ldc, g.stride_c, g.batch,
                                                         CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
      return;
    }
    MEGACPP_CUBLAS_CHECK(cublasSgemmStridedBatched_64(cublas_handle(), op_b, op_a, g.n, g.m, g.k, &alpha, b, g.ldb,
                                                      g.stride_b, a, g.lda, g.stride_a, &beta, c, g.ldc, g.stride_c, g.batch));
  } else {
    MEGACPP_CUBLAS_CHECK(cublasDgemmStridedBatched_64(cublas_handle(), op_b, op_a, g.n, g.m, g.k, &alpha, b, g.ldb,
                                                      g.stride_b, a, g.lda, g.stride_a, &beta, c, g.ldc, g.stride_c, g.batch));
  }
}

// Row-major strided batched GEMM with the semantics of backend.hpp (reference: cpu::gemm).
template <class T>
void gemm(const GemmArgs& g, T alpha, const T* a, const T* b, T beta, T* c) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.stride_c == 0 && g.batch > 1) {
    // The contract forbids a shared C (callers loop instead). Should one arrive anyway, apply
    // the formula literally, entry by entry in batch order, rather than let cuBLAS race on C.
    GemmArgs one = g;
    one.batch = 1;
    for (index_t i = 0; i < g.batch; ++i) gemm<T>(one, alpha, a + i * g.stride_a, b + i * g.stride_b, beta, c);
    return;
  }
  if (g.k == 0) {
    scale_matrices_kernel<T><<<grid_for(g.batch * g.m * g.n), kThreads, 0, kStream>>>(g.batch, g.m, g.n, g.ldc,
                                                                                       g.stride_c, beta, c);
    MEGACPP_CUDA_CHECK_LAUNCH(scale_matrices_kernel);
    return;
  }
  gemm_strided<T>(g, alpha, a, b, beta, c);
}

// The same GEMM on bf16 A and B with fp32 sums into fp32 C (reference: cpu::gemm_bf16):
// cublasGemmStridedBatchedEx with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F, so the products
// run on the tensor cores (which take bf16 for any math mode) and accumulate in fp32.
// megacpp's bf16 is 16 raw bits, the layout of CUDA's __nv_bfloat16.
inline void gemm_bf16(const GemmArgs& g, float alpha, const bf16* a, const bf16* b, float beta, float* c) {
  static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "megacpp_bf16_must_match_nv_bfloat16");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.stride_c == 0 && g.batch > 1) {  // a shared C: entry by entry, as gemm() does
    GemmArgs one = g;
    one.batch = 1;
    for (index_t i = 0; i < g.batch; ++i) gemm_bf16(one, alpha, a + i * g.stride_a, b + i * g.stride_b, beta, c);
    return;
  }
  if (g.k == 0) {
    scale_matrices_kernel<float><<<grid_for(g.batch * g.m * g.n), kThreads, 0, kStream>>>(g.batch, g.m, g.n, g.ldc,
                                                                                           g.stride_c, beta, c);
    MEGACPP_CUDA_CHECK_LAUNCH(scale_matrices_kernel);
    return;
  }
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T (see the file comment).
  MEGACPP_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(cublas_handle(), op_b, op_a, g.n, g.m, g.k, &alpha, b, CUDA_R_16BF,
                                                     g.ldb, g.stride_b, a, CUDA_R_16BF, g.lda, g.stride_a, &beta, c,
                                                     CUDA_R_32F, g.ldc, g.stride_c, g.batch, CUBLAS_COMPUTE_32F,
                                                     CUBLAS_GEMM_DEFAULT));
}

}  // namespace megacpp::cuda
