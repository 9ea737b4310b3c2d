// tests/cuda_emulation/attention_emulated.hpp: the CUDA attention kernels run on the emulator, on
// the problems of tests/cuda/attention_bf16_cases.hpp, with host vectors as device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/attention_bf16_cases.hpp"

namespace megacpp::cuda_emulation {

/// What a forward and its backward produce: o, lse, and dq, dk, dv added into their initial values.
struct AttentionRun {
  std::vector<float> o, lse, dq, dk, dv;
};

/// Bytes taken off every dynamic shared memory request (0: the launch code's sizes). An injected
/// fault: a launch that asks for less than its kernel's plan uses.
struct LaunchFaults {
  std::size_t shared_shortfall = 0;
};

/// The gradients a backward asks for (the others are passed as null pointers, as the kernel
/// contract allows).
struct GradientsWanted {
  bool q = true, k = true, v = true;
};

/// The bf16 tensor-core attention (detail/attention_mma.cuh) as detail/attention_mma_launch.cuh
/// launches it: forward on `raw` (fp32: the kernels round as they stage), then backward from the
/// forward's o and lse with grad_o, the wanted gradients added into `initial`'s dq, dk, dv.
/// `resident_blocks` stands for the device's (the launch code asks the device): the dK/dV pass
/// splits the query heads of a kv head as key_value_splits decides from it (1: never).
AttentionRun run_bf16_attention(const attention_bf16_test::Problem& p, const attention_bf16_test::Inputs& raw,
                                const AttentionRun& initial, const LaunchFaults& faults = {},
                                const GradientsWanted& wanted = {}, index_t resident_blocks = 1);

/// The dK/dV pass's blocks before any split (its key tiles x kv heads), and the splits
/// tensor_core::key_value_splits gives them when the device holds `resident_blocks`.
index_t key_value_blocks(const attention_bf16_test::Problem& p);
index_t key_value_splits(const attention_bf16_test::Problem& p, index_t resident_blocks);

/// The bits of the bf16 copy the tensor-core kernels read of `rows` rows of `dim` floats at `src`
/// (to_bf16_rows_kernel launched as tensor_core::Bf16Rows launches it): rows of
/// bf16_row_width(dim), zero past dim.
std::vector<std::uint16_t> emulated_bf16_rows(const float* src, index_t rows, index_t dim);

/// What the backward's first kernel (grad_output_rows_kernel, as tensor_core::GradOutputRows launches
/// it) makes of `rows` rows of dO and O (`dim` floats each): the bits of dO's bf16 copy (rows of
/// bf16_row_width(dim)) and D = rowsum(bf16(dO) o O) per row.
struct GradOutputRowsRun {
  std::vector<std::uint16_t> grad_o_bits;
  std::vector<float> drow;
};
GradOutputRowsRun emulated_grad_output_rows(const float* grad_o, const float* o, index_t rows, index_t dim);

/// The fp32 CUDA-core attention (detail/attention.cuh) as detail/attention_launch.cuh launches it,
/// the wanted gradients added into `initial`'s (the others passed as null pointers).
AttentionRun run_fp32_attention(const attention_bf16_test::Problem& p, const attention_bf16_test::Inputs& raw,
                                const AttentionRun& initial, const GradientsWanted& wanted = {});

}  // namespace megacpp::cuda_emulation
