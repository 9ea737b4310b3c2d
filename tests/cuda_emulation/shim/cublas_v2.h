// tests/cuda_emulation/shim/cublas_v2.h: the cuBLAS names detail/check.cuh mentions (no GEMM is
// emulated: the attention kernels never call cuBLAS).
#pragma once

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };
inline const char* cublasGetStatusString(cublasStatus_t) { return "cuBLAS is not emulated"; }
