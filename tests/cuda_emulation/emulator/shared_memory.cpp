// tests/cuda_emulation/emulator/shared_memory.cpp: see shared_memory.hpp. The alignments match the
// kernels' declarations (GCC and Clang want a definition's alignment to match its declarations'),
// and they are thread_local as the shim's __shared__ makes the declarations.
#include "emulator/shared_memory.hpp"

#include "emulator/launch.hpp"

// The bf16 tensor-core attention (detail/attention_mma.cuh): `tile_memory`, 128-byte aligned.
namespace megacpp::cuda::flash::tensor_core {
thread_local __attribute__((aligned(128))) unsigned char tile_memory[megacpp::cuda_emulation::kMaxDynamicShared];
}
// The fp32 attention (detail/attention.cuh): `shared_bytes`, 16-byte aligned.
namespace megacpp::cuda::flash {
thread_local __attribute__((aligned(16))) unsigned char shared_bytes[megacpp::cuda_emulation::kMaxDynamicShared];
}
// Mamba-3's decode step (detail/ssm/step.cuh): `step_shared`, 16-byte aligned.
namespace megacpp::cuda::ssm {
thread_local __attribute__((aligned(16))) unsigned char step_shared[megacpp::cuda_emulation::kMaxDynamicShared];
}
// M2RNN's decode step (detail/m2rnn_step.cuh): `m2rnn_step_shared`, 16-byte aligned.
namespace megacpp::cuda::m2rnn {
thread_local __attribute__((aligned(16))) unsigned char m2rnn_step_shared[megacpp::cuda_emulation::kMaxDynamicShared];
// M2RNN's training recurrence (detail/m2rnn_scan.cuh): `m2rnn_scan_shared`, 16-byte aligned.
thread_local __attribute__((aligned(16))) unsigned char m2rnn_scan_shared[megacpp::cuda_emulation::kMaxDynamicShared];
}

// The MoE experts' one-launch grouped products (detail/grouped_gemm.cuh): `grouped_gemm_shared`,
// 16-byte aligned.
namespace megacpp::cuda::moe {
thread_local __attribute__((aligned(16))) unsigned char grouped_gemm_shared[megacpp::cuda_emulation::kMaxDynamicShared];
}

namespace megacpp::cuda_emulation {

const SharedArena* shared_arenas() {
  static const SharedArena arenas[] = {
      {"tile_memory", megacpp::cuda::flash::tensor_core::tile_memory, kMaxDynamicShared},
      {"shared_bytes", megacpp::cuda::flash::shared_bytes, kMaxDynamicShared},
      {"step_shared", megacpp::cuda::ssm::step_shared, kMaxDynamicShared},
      {"m2rnn_step_shared", megacpp::cuda::m2rnn::m2rnn_step_shared, kMaxDynamicShared},
      {"m2rnn_scan_shared", megacpp::cuda::m2rnn::m2rnn_scan_shared, kMaxDynamicShared},
      {"grouped_gemm_shared", megacpp::cuda::moe::grouped_gemm_shared, kMaxDynamicShared},
      {nullptr, nullptr, 0},
  };
  return arenas;
}

}  // namespace megacpp::cuda_emulation
