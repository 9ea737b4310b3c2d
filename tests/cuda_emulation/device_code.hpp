// tests/cuda_emulation/device_code.hpp: the CUDA backend's attention device code, unmodified,
// compiled by the host compiler through the shims (shim/: the CUDA headers, keywords and built-in
// variables, mapped onto the emulator). Include it from one translation unit only: the kernels
// are instantiated there (attention_emulated.cpp).
#pragma once

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/attention.cuh"
#include "megacpp/backends/cuda/detail/attention_mma.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL
