// CUDA backend: reading an elementwise operand (core/backend.hpp's In<T>) at an element of the
// kernel's grid. Shared by the maps (elementwise.cuh) and the reductions (reduce.cuh), apart from
// both so that the reductions' kernels compile without the maps' launches.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/core/backend.hpp"

namespace megacpp::cuda {

// Element `flat` of a full operand, or column `col` of a broadcast one (a row repeated over rows).
template <class T>
__device__ inline T operand_at(const In<T>& in, index_t flat, index_t col) {
  return in.broadcast ? in.data[col] : in.data[flat];
}

}  // namespace megacpp::cuda
