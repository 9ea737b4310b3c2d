// CUDA backend: the PTX instructions the bf16 attention and the one-launch grouped products are
// written in, one inline-PTX wrapper each (PTX ISA 8.x, sm_80 and newer):
//
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   D (16 x 8, fp32) += A (16 x 16) B (16 x 8)
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16      four 8 x 8 bf16 matrices, shared -> registers
//   cp.async.cg / .ca.shared.global (16 / 4 bytes)        global -> shared without registers, in
//   cp.async.commit_group, cp.async.wait_group N           groups this thread waits for
//
// Unlike WMMA's, these fragments' layouts are specified (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"), which is what lets the attention keep S, P and O in
// registers and do its per-row softmax there. With g = lane / 4 and t = lane % 4:
//
//   A (16 x 16, row), a[4] of bf16 pairs: a[0] = A(g, 2t..2t+1)      a[1] = A(g + 8, 2t..2t+1)
//                                         a[2] = A(g, 2t+8..2t+9)    a[3] = A(g + 8, 2t+8..2t+9)
//   B (16 x 8, col),  b[2] of bf16 pairs: b[0] = B(2t..2t+1, g)      b[1] = B(2t+8..2t+9, g)
//   C, D (16 x 8),    c[4] of floats:     c[0..1] = C(g, 2t..2t+1)   c[2..3] = C(g + 8, 2t..2t+1)
//
// (the lower column or row of a pair in the low 16 bits). ldmatrix: lanes 8i..8i+7 give the
// addresses of rows 0..7 of matrix i (16 bytes each, 16-byte aligned); r[i] receives
// M_i(g, 2t..2t+1), or with .trans M_i(2t..2t+1, g). So one ldmatrix.x4 loads an A fragment, or
// the B fragments of two adjacent 8-column tiles, from a row-major tile in shared memory, whether
// the tile holds B or B's transpose (attention_mma_tiles.cuh).
//
// cp.async (PTX ISA, "Data Movement and Conversion Instructions: cp.async"): the copy runs while
// the thread goes on; wait_group N returns once at most N of this thread's committed groups are
// still in flight, and only then are its copies' bytes in shared memory; other threads see them
// after a barrier that follows the wait. So a tile for the next step is fetched while this step's
// products run, with no registers held for it. tests/cuda_emulation's shim of this header
// implements the same semantics on the host (its copies land only at the wait).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

namespace megacpp::cuda::ptx {

/// d += a b on the tensor cores, every lane of the warp at once (layouts above).
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// r[i] = this lane's pair of matrix i; `row` is this lane's row address (lanes 8i..8i+7: matrix i).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// As ldmatrix_x4, each matrix transposed on the way.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// Starts copying 16 bytes (16-byte aligned at both ends) from global to shared memory.
__device__ __forceinline__ void cp_async_16(void* shared, const void* global) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

/// Starts copying 4 bytes (4-byte aligned at both ends) from global to shared memory.
__device__ __forceinline__ void cp_async_4(void* shared, const void* global) {
  const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(global));
}

/// Closes this thread's group of copies started since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace megacpp::cuda::ptx
