/// \file
/// megacpp/core/config.hpp: compiler portability macros shared by host and device code.
#pragma once

#include <cstdint>

/// One macro lets the same header compile with g++ and nvcc (CuTe's CUTE_HOST_DEVICE idea):
/// under nvcc a function marked MEGACPP_HD runs on host and device; under g++ it is plain inline.
#if defined(__CUDACC__)
#define MEGACPP_HD __host__ __device__ inline
#else
#define MEGACPP_HD inline
#endif

namespace megacpp {

/// Sizes and indices are signed 64-bit everywhere: shapes of 2^31+ elements are real at V = 65536.
using index_t = std::int64_t;

}  // namespace megacpp
