// tests/cuda_emulation/shim/megacpp/backends/cuda/detail/guard.cuh: stands in for the backend's
// guard (found first: the shim folder comes first on the include path). The real guard refuses
// any compiler but nvcc by testing __CUDACC__; defining __CUDACC__ for g++ instead would change
// other headers (libstdc++ drops its __float128 overloads, Catch2 its GCC paths, megacpp's
// MEGACPP_HD), so this guard keeps only the rule that the detail headers are internal, and
// includes what nvcc includes implicitly in every CUDA translation unit.
#ifndef MEGACPP_CUDA_BACKEND_INTERNAL
#error "megacpp/backends/cuda/detail/* are internal: define MEGACPP_CUDA_BACKEND_INTERNAL (tests/cuda_emulation/device_code.hpp does)"
#endif
#include <cuda_runtime.h>
