// CUDA backend: a small host -> device copy carried by a kernel's parameters (the kernel; memory.cuh
// launches it).
//
// cudaMemcpy from pageable host memory first waits for everything queued on the stream (CUDA
// Runtime API, "API synchronization behavior": "for transfers from pageable host memory to device
// memory, a stream sync is performed before the copy is initiated"). The uploads a step makes are
// mostly small (a decode step's token ids and RoPE positions, an attention layer's tile list, a
// batch's ids checked on the host), and each such wait hands the host's lead back to the GPU as
// idle time. A launch instead copies its parameters when it is called and is ordered on the stream like
// any kernel: the host never waits, later kernels see the bytes, and the caller may reuse its
// buffer as soon as the call returns, as after cudaMemcpy. A copy of up to kInlineUploadLaunches
// payloads goes up this way (a batch's 4 x 1024 token ids, 16 KB, in 5 launches); a larger one
// costs more launches than one wait, and takes cudaMemcpy (a guess: not measured on a GPU yet).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>

#include "megacpp/backends/cuda/detail/check.cuh"

namespace megacpp::cuda {

// The payload's bytes: with the destination and the count, the parameters stay under the 4 KB
// every architecture accepts (CUDA Programming Guide, "Function Parameters"; 32 KB needs CUDA 12.1
// and Volta or later).
inline constexpr std::size_t kInlineUploadBytes = 3968;
inline constexpr std::size_t kInlineUploadLaunches = 16;  // at most 63,488 bytes per copy

struct InlineUpload {
  alignas(16) unsigned char bytes[kInlineUploadBytes];
};

// dst[i] = payload.bytes[i] for i < count (count <= kInlineUploadBytes): a byte per step of a
// thread, so any destination alignment and any element type. A template over the byte type, like
// every kernel here, so that each translation unit's instantiation is a mergeable definition.
// __grid_constant__: read where the launch put the parameters, not copied to each thread first.
template <class Byte>
__global__ void store_inline_upload_kernel(const __grid_constant__ InlineUpload payload, index_t count, Byte* dst) {
  for (index_t i = global_thread(); i < count; i += grid_stride()) dst[i] = static_cast<Byte>(payload.bytes[i]);
}

}  // namespace megacpp::cuda
