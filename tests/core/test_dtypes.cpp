// bf16 / f16 conversions: bit-exact round to nearest even, checked against independent references.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/random.hpp"

using namespace megacpp;

namespace {
std::uint32_t bits_of(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
float float_of(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Reference bf16 rounding by exhaustive comparison of the two neighbouring bf16 values in double.
std::uint16_t bf16_reference(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t down = u & 0xFFFF0000u;
  const std::uint32_t up = down + 0x10000u;
  const double x = f, lo = float_of(down);
  // `up` may be inf after the exponent carries; treat it as the next power of two (IEEE overflow rule).
  const double hi = (up & 0x7F800000u) == 0x7F800000u ? std::ldexp(1.0, 128) * (f < 0 ? -1 : 1) : float_of(up);
  const double d_lo = std::abs(x - lo), d_hi = std::abs(hi - x);
  if (d_lo < d_hi) return static_cast<std::uint16_t>(down >> 16);
  if (d_hi < d_lo) return static_cast<std::uint16_t>(up >> 16);
  return static_cast<std::uint16_t>(((down >> 16) & 1u) ? up >> 16 : down >> 16);  // tie: even
}

// IEEE binary16 bits -> value, from the format's definition (1 sign, 5 exponent bits biased by 15,
// 10 mantissa bits; exponent 0: subnormal m * 2^-24; exponent 31: inf or NaN). The f16 references
// below, rather than the compiler's _Float16: clang before 15 has no _Float16 on x86-64.
double f16_value(std::uint16_t b) {
  const int e = (b >> 10) & 31, m = b & 1023;
  const double sign = (b & 0x8000u) ? -1.0 : 1.0;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}

// Reference f16 rounding (not NaN): the two neighbouring finite f16 values found by binary search
// over the magnitude codes, the nearer one taken, ties to the even code; above 65504 the next
// value is 65536 (the IEEE overflow rule: 65520 and more round to inf, code 0x7C00).
std::uint16_t f16_reference(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double x = std::abs(static_cast<double>(f));
  if (std::isinf(x)) return static_cast<std::uint16_t>(sign | 0x7C00u);
  std::uint16_t lo = 0, hi = 0x7BFF;  // the largest code whose value is <= x lies in [lo, hi]
  while (lo < hi) {
    const auto mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (f16_value(mid) <= x) lo = mid;
    else hi = static_cast<std::uint16_t>(mid - 1);
  }
  const double down = f16_value(lo), up = lo == 0x7BFF ? 65536.0 : f16_value(static_cast<std::uint16_t>(lo + 1));
  const double d_down = x - down, d_up = up - x;
  const bool take_up = d_up < d_down || (d_up == d_down && (lo & 1u));
  return static_cast<std::uint16_t>(sign | (take_up ? lo + 1 : lo));
}
}  // namespace

TEST_CASE("f16 from float rounds to nearest even (reference rounding) on edge cases and random floats", "[dtypes]") {
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f,
                            5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min()};
  for (float f : specials) {
    INFO("f = " << f);
    CHECK(f16(f).bits == f16_reference(f));
  }
  Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns restricted to the f16 range and around it, NaNs excluded.
    const std::uint32_t u = static_cast<std::uint32_t>(rng.next_u64());
    const float f = float_of((u & 0x8FFFFFFFu) | 0x30000000u);
    const std::uint16_t ref_bits = f16_reference(f);
    if (f16(f).bits != ref_bits) {
      INFO("f = " << f << " bits " << u);
      REQUIRE(f16(f).bits == ref_bits);
    }
  }
  CHECK(std::isnan(static_cast<float>(f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("every f16 value round-trips through float exactly", "[dtypes]") {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const f16 h = f16::from_bits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(h);
    const std::uint16_t b16 = static_cast<std::uint16_t>(b);
    const double ref = f16_value(b16);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(ref));
      continue;
    }
    REQUIRE(static_cast<double>(f) == ref);
    REQUIRE(f16(f).bits == b16);
  }
}

TEST_CASE("bf16 from float rounds to nearest even, overflows to inf, keeps NaN", "[dtypes]") {
  CHECK(bf16(1.0f).bits == 0x3F80);
  CHECK(float_of(0x3F808000u) == 1.00390625f);
  CHECK(bf16(float_of(0x3F808000u)).bits == 0x3F80);  // tie, even stays
  CHECK(bf16(float_of(0x3F818000u)).bits == 0x3F82);  // tie, odd rounds up
  CHECK(bf16(float_of(0x3F808001u)).bits == 0x3F81);  // just above the tie
  CHECK(bf16(std::numeric_limits<float>::max()).bits == 0x7F80);  // rounds to +inf
  CHECK(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  Rng rng(11);
  for (int i = 0; i < 500000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng.next_u64());
    if ((u & 0x7F800000u) == 0x7F800000u) u &= 0xBFFFFFFFu;  // skip inf/NaN patterns
    const float f = float_of(u);
    if (bf16(f).bits != bf16_reference(f)) {
      INFO("bits " << u);
      REQUIRE(bf16(f).bits == bf16_reference(f));
    }
  }
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {  // exact round trip of every finite bf16
    const bf16 x = bf16::from_bits(static_cast<std::uint16_t>(b));
    if (!std::isnan(static_cast<float>(x))) REQUIRE(bf16(static_cast<float>(x)).bits == b);
  }
}

TEST_CASE("dtype names match safetensors", "[dtypes]") {
  CHECK(dtype_name<float>() == "F32");
  CHECK(dtype_name<double>() == "F64");
  CHECK(dtype_name<bf16>() == "BF16");
  CHECK(dtype_name<f16>() == "F16");
  CHECK(dtype_name<std::int32_t>() == "I32");
}
