// tests/cuda_emulation/shim/cuda_bf16.h: __nv_bfloat16 and the conversions the kernels use, bit
// for bit as the device's: float -> bf16 rounds to nearest, ties to even (cvt.rn.bf16.f32; PTX ISA,
// "cvt"), overflow to infinity, subnormals kept; a NaN becomes the canonical NaN 0x7FFF as
// cuda_bf16.hpp's own host path returns. bf16 -> float is exact (the 16 high bits).
#pragma once

#include <cstdint>
#include <cstring>

#include "emulator/options.hpp"

struct __nv_bfloat16 {
  unsigned short __x;  // the raw bits
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return {0x7FFFu};
  if (::megacpp::cuda_emulation::options().bf16_truncate) return {static_cast<unsigned short>(u >> 16)};  // injected fault
  u += 0x7FFFu + ((u >> 16) & 1u);  // below half of the last kept bit rounds down, above up, a tie to even
  return {static_cast<unsigned short>(u >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
