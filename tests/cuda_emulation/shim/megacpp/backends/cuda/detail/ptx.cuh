// tests/cuda_emulation/shim/megacpp/backends/cuda/detail/ptx.cuh: stands in for the backend's
// inline-PTX wrappers (found first on the include path), with the semantics the PTX ISA gives them:
//
//   mma_bf16_16x8x16   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ("Matrix Fragments for
//                      mma.m16n8k16 with floating point type": the layouts in the real header)
//   ldmatrix_x4[_trans] ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16
//   cp_async_16 / _4, cp_async_commit, cp_async_wait<N>: cp.async, its groups and waits
//
// mma and ldmatrix are warp collectives: every lane of the warp must issue them, the same one
// (the emulator's rendezvous checks both). Rules checked, each a real GPU failure mode:
// ldmatrix row addresses 16-byte aligned and inside the dynamic shared memory the launch
// requested; cp.async shared ends inside it too, both ends aligned to the copy's size. The
// product: each element of A B summed over k in float, in k order, onto C, from exact products
// (bf16 x bf16 is exact in float); the hardware's order and internal precision are unspecified,
// so results agree with a GPU to fp32 rounding, not bit for bit. cp.async copies land when their
// group is waited for (emulator/device.hpp), not before.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda_bf16.h"
#include "emulator/device.hpp"
#include "emulator/options.hpp"

namespace megacpp::cuda::ptx {
namespace emulation {
namespace emu = ::megacpp::cuda_emulation;

inline float low_bf16(std::uint32_t pair) { return __bfloat162float(__nv_bfloat16{static_cast<unsigned short>(pair & 0xFFFFu)}); }
inline float high_bf16(std::uint32_t pair) { return __bfloat162float(__nv_bfloat16{static_cast<unsigned short>(pair >> 16)}); }

// Operands: [0] d (float[4]), [1] a (uint32[4]), [2] b (uint32[2]).
inline void mma(const emu::LaneOperands (&lanes)[emu::kWarpSize]) {
  float a[16][16], b[16][8], d[16][8];
  for (unsigned l = 0; l < emu::kWarpSize; ++l) {
    const unsigned g = l / 4, t = l % 4;
    const auto* fa = static_cast<const std::uint32_t*>(lanes[l][1]);
    const auto* fb = static_cast<const std::uint32_t*>(lanes[l][2]);
    const auto* fd = static_cast<const float*>(lanes[l][0]);
    for (unsigned r = 0; r < 4; ++r) {  // a[r]: rows g, g + 8, g, g + 8; columns 2t.., 2t.., 2t + 8.., 2t + 8..
      const unsigned row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
      a[row][col] = low_bf16(fa[r]);
      a[row][col + 1] = high_bf16(fa[r]);
    }
    for (unsigned r = 0; r < 2; ++r) {  // b[r]: rows 2t.., 2t + 8..; column g
      b[2 * t + 8 * r][g] = low_bf16(fb[r]);
      b[2 * t + 8 * r + 1][g] = high_bf16(fb[r]);
    }
    for (unsigned e = 0; e < 4; ++e) d[g + 8 * (e / 2)][2 * t + e % 2] = fd[e];
  }
  float out[16][8];
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 8; ++j) {
      float sum = d[i][j];
      for (unsigned k = 0; k < 16; ++k) sum += a[i][k] * b[k][j];
      out[i][j] = sum;
    }
  for (unsigned l = 0; l < emu::kWarpSize; ++l)
    for (unsigned e = 0; e < 4; ++e) static_cast<float*>(lanes[l][0])[e] = out[l / 4 + 8 * (e / 2)][2 * (l % 4) + e % 2];
}

// Operands: [0] r (uint32[4]), [1] this lane's row address.
template <bool Transposed>
void ldmatrix(const emu::LaneOperands (&lanes)[emu::kWarpSize]) {
  std::uint16_t m[4][8][8];  // matrix, row, column
  for (unsigned l = 0; l < emu::kWarpSize; ++l) std::memcpy(m[l / 8][l % 8], lanes[l][1], 16);
  for (unsigned l = 0; l < emu::kWarpSize; ++l) {
    const unsigned g = l / 4, t = l % 4;
    auto* r = static_cast<std::uint32_t*>(lanes[l][0]);
    for (unsigned i = 0; i < 4; ++i) {
      const std::uint16_t lo = Transposed ? m[i][2 * t][g] : m[i][g][2 * t];
      const std::uint16_t hi = Transposed ? m[i][2 * t + 1][g] : m[i][g][2 * t + 1];
      r[i] = static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16;
    }
  }
}

inline std::string where(const char* op, const char* file, unsigned line) {
  return std::string(op) + " (" + file + ":" + std::to_string(line) + ")";
}

// A shared-memory address of `bytes` bytes: aligned to `align`, inside the requested dynamic shared memory.
inline void check_shared(const char* op, const void* p, std::size_t bytes, std::size_t align, const char* file,
                         unsigned line) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address % align != 0)
    emu::device_fail(where(op, file, line) + ": shared address " + std::to_string(address) + " is not " +
                     std::to_string(align) + "-byte aligned");
  if (!emu::in_shared_memory(p)) emu::device_fail(where(op, file, line) + ": the address is not in shared memory");
  if (!emu::within_requested_shared(p, bytes))
    emu::device_fail(where(op, file, line) + ": " + std::to_string(bytes) +
                     " bytes run past the dynamic shared memory the launch requested");
}

template <bool Transposed>
void ldmatrix_lane(std::uint32_t (&r)[4], const void* row, const char* file, unsigned line) {
  const char* op = Transposed ? "ldmatrix.x4.trans" : "ldmatrix.x4";
  const auto& o = emu::options();
  if (o.ldmatrix_fault_lane < 0 || o.ldmatrix_fault_lane == static_cast<int>(emu::lane_index()))
    row = static_cast<const char*>(row) + o.ldmatrix_address_shift;  // injected fault
  check_shared(op, row, 16, 16, file, line);
  emu::warp_rendezvous({op, nullptr, 0, file, line}, {r, const_cast<void*>(row), nullptr, nullptr}, &ldmatrix<Transposed>);
}

inline void cp_async(void* shared, const void* global, std::size_t bytes, const char* file, unsigned line) {
  check_shared("cp.async", shared, bytes, bytes, file, line);
  if (reinterpret_cast<std::uintptr_t>(global) % bytes != 0)
    emu::device_fail(where("cp.async", file, line) + ": global address is not " + std::to_string(bytes) + "-byte aligned");
  emu::async_copy({shared, global, bytes});
}
}  // namespace emulation

inline void mma_bf16_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                             const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  namespace em = emulation;
  em::emu::warp_rendezvous({"mma.m16n8k16.bf16", nullptr, 0, file, line},
                           {d, const_cast<std::uint32_t*>(a), const_cast<std::uint32_t*>(b), nullptr}, &em::mma);
}

inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                        unsigned line = __builtin_LINE()) {
  emulation::ldmatrix_lane<false>(r, row, file, line);
}

inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                              unsigned line = __builtin_LINE()) {
  emulation::ldmatrix_lane<true>(r, row, file, line);
}

inline void cp_async_16(void* shared, const void* global, const char* file = __builtin_FILE(),
                        unsigned line = __builtin_LINE()) {
  emulation::cp_async(shared, global, 16, file, line);
}

inline void cp_async_4(void* shared, const void* global, const char* file = __builtin_FILE(),
                       unsigned line = __builtin_LINE()) {
  emulation::cp_async(shared, global, 4, file, line);
}

inline void cp_async_commit() { ::megacpp::cuda_emulation::async_commit(); }

template <int N>
void cp_async_wait() {
  ::megacpp::cuda_emulation::async_wait(N);
}

}  // namespace megacpp::cuda::ptx
