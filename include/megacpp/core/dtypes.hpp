/// \file
/// megacpp/core/dtypes.hpp: bf16 and f16 storage types with round-to-nearest-even conversion.
///
/// Both are 16-bit storage formats; arithmetic goes through float (each converts implicitly to
/// float, and is built from float explicitly so that precision loss is always visible in code).
/// The conversions are bit-exact and run on host and device (MEGACPP_HD).
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "megacpp/core/config.hpp"

namespace megacpp {

namespace detail {
MEGACPP_HD std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}
MEGACPP_HD float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

// float -> bf16 bits, round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then
// truncate. Overflow rounds to infinity as IEEE requires; NaN stays a (quiet) NaN of the same sign.
MEGACPP_HD std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = float_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding_bias = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding_bias) >> 16);
}
MEGACPP_HD float bf16_bits_to_float(std::uint16_t b) {
  return bits_to_float(static_cast<std::uint32_t>(b) << 16);
}

// float -> IEEE binary16 bits, round to nearest even, with subnormals, overflow to inf and NaN.
// Algorithm: F. Giesen, "float_to_half_fast3_rtne" (public domain, 2016). Subnormals are rounded
// by the FPU itself: adding a magic constant aligns the mantissa so the hardware's RNE applies.
MEGACPP_HD std::uint16_t float_to_f16_bits(float f) {
  constexpr std::uint32_t f32_infinity = 255u << 23;
  constexpr std::uint32_t f16_overflow = (127u + 16u) << 23;  // 2^16: rounds to inf from here
  constexpr std::uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  std::uint32_t u = float_to_bits(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint16_t out;
  if (u >= f16_overflow) {
    out = u > f32_infinity ? 0x7E00 : 0x7C00;  // NaN stays NaN, everything else is inf
  } else if (u < (113u << 23)) {               // below 2^-14: subnormal half (or zero)
    const float aligned = bits_to_float(u) + bits_to_float(denorm_magic);
    out = static_cast<std::uint16_t>(float_to_bits(aligned) - denorm_magic);
  } else {
    const std::uint32_t mantissa_odd = (u >> 13) & 1u;
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xFFFu;  // rebias exponent, round half
    u += mantissa_odd;                                            // ties to even
    out = static_cast<std::uint16_t>(u >> 13);
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}
// IEEE binary16 bits -> float (exact). Same source as above ("half_to_float").
MEGACPP_HD float f16_bits_to_float(std::uint16_t h) {
  constexpr std::uint32_t magic = 113u << 23;
  constexpr std::uint32_t shifted_exp = 0x7C00u << 13;
  std::uint32_t o = (static_cast<std::uint32_t>(h) & 0x7FFFu) << 13;
  const std::uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // inf / NaN
  } else if (exp == 0) {      // zero / subnormal: renormalise through the FPU
    o += 1u << 23;
    o = float_to_bits(bits_to_float(o) - bits_to_float(magic));
  }
  return bits_to_float(o | ((static_cast<std::uint32_t>(h) & 0x8000u) << 16));
}
}  // namespace detail

/// bfloat16: 8 exponent bits, 7 mantissa bits.
struct bf16 {
  std::uint16_t bits = 0;  ///< the raw 16 bits
  bf16() = default;  ///< +0
  /// Rounds `f` to the nearest bf16, ties to even (overflow to infinity, NaN stays NaN).
  MEGACPP_HD explicit bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  /// The exact float value.
  MEGACPP_HD operator float() const { return detail::bf16_bits_to_float(bits); }
  /// The bf16 with raw bits `b`.
  MEGACPP_HD static bf16 from_bits(std::uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }
};

/// IEEE 754 binary16: 5 exponent bits, 10 mantissa bits.
struct f16 {
  std::uint16_t bits = 0;  ///< the raw 16 bits
  f16() = default;  ///< +0
  /// Rounds `f` to the nearest f16, ties to even (subnormals kept, overflow to infinity).
  MEGACPP_HD explicit f16(float f) : bits(detail::float_to_f16_bits(f)) {}
  /// The exact float value.
  MEGACPP_HD operator float() const { return detail::f16_bits_to_float(bits); }
  /// The f16 with raw bits `b`.
  MEGACPP_HD static f16 from_bits(std::uint16_t b) {
    f16 x;
    x.bits = b;
    return x;
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "megacpp_16bit_types_must_be_2_bytes");

/// Converts between any two element types: 16-bit types go through float.
template <class To, class From>
MEGACPP_HD To convert_element(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, bf16> || std::is_same_v<To, f16>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_same_v<From, bf16> || std::is_same_v<From, f16>) {
    return static_cast<To>(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

/// Element types a Tensor may hold; `compute` types are the ones autograd ops compute in.
template <class T>
inline constexpr bool is_storage_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
    std::is_same_v<T, f16> || std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::uint8_t>;
/// True for the element types autograd ops compute in (float, double); see is_storage_type_v.
template <class T>
inline constexpr bool is_compute_type_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// Short names, matching the safetensors dtype strings.
template <class T>
constexpr std::string_view dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, double>) return "F64";
  else if constexpr (std::is_same_v<T, bf16>) return "BF16";
  else if constexpr (std::is_same_v<T, f16>) return "F16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "I32";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "U8";
  else static_assert(sizeof(T) == 0, "megacpp_unsupported_dtype: use float, double, bf16, f16, int32_t or uint8_t");
}

}  // namespace megacpp
