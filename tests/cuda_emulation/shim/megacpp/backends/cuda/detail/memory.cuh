// tests/cuda_emulation/shim/megacpp/backends/cuda/detail/memory.cuh: stands in for the backend's
// device allocations (found first on the include path). The emulation has no device memory: host
// memory is device memory, so the scratch buffer and the host-to-device copy the scan's chunk table
// helpers mention (detail/ssm/scan.cuh: DeviceChunks) are a host array and a memcpy. The emulated
// launches allocate their buffers themselves (scan_emulated.cpp), as host vectors.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstring>
#include <memory>

namespace megacpp::cuda {

// n elements of "device" scratch: a host array, uninitialized as cudaMalloc leaves it.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : data_(n ? std::make_unique_for_overwrite<T[]>(n) : nullptr) {}
  T* get() const { return data_.get(); }

 private:
  std::unique_ptr<T[]> data_;
};

template <class T>
void copy_from_host(T* dst, const T* src, std::size_t n) {
  if (n) std::memcpy(static_cast<void*>(dst), src, n * sizeof(T));
}

}  // namespace megacpp::cuda
