// tests/cuda_emulation/reduce_emulated.hpp: the CUDA backend's axis reductions (Cuda::reduce:
// detail/reduce.cuh) run on the emulator, with host pointers as device memory.
#pragma once

#include "megacpp/core/backend.hpp"
#include "megacpp/core/functors.hpp"

namespace megacpp::cuda_emulation {

/// cuda::reduce (detail/reduce_launch.cuh), launched as it launches: out[o, i] = beta * out[o, i] +
/// scale * sum_j f(ins[o, j, i]...). Instantiated for f = fn::Mul over two operands and fn::Square
/// over one, in float and double (reduce_emulated.cpp).
template <class T, class F, class... Ins>
void emulated_reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins);

/// How many chunks of j cuda::reduce cuts (outer, n, inner) into (1: one pass).
index_t reduce_chunks(index_t outer, index_t n, index_t inner);

}  // namespace megacpp::cuda_emulation
