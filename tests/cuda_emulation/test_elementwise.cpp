// tests/cuda_emulation/test_elementwise.cpp: the CUDA backend's elementwise kernels
// (detail/elementwise.cuh) on the emulator against the CPU backend's (cpu/detail/elementwise.hpp),
// in float and double, through each launch's choices: a 16-byte packet per thread (aligned
// pointers, whole packets, broadcast rows of whole packets) or one element (a ragged length, an
// unaligned pointer, a broadcast row of no whole packets); outputs aliasing an operand; beta 0 over
// NaN and beta 1; AdamW's in-place step; expand, strided copies and transposes; conversions to and
// from bf16 (vectors of 4 or single elements); fills (zero bytes, -0, values, unaligned). The maps
// and AdamW within rounding of the CPU (GCC may fuse multiply-adds differently in the two), the
// rest bit for bit; the index range check's extremes; host-to-device copies of up to 63,488 bytes
// carried by launches' parameters (memory.cuh), byte-exact; and the same bits under the reversed
// and greedy schedules; map_to_bf16 (a map's results rounded to bf16 in its pass) against map then
// convert, bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "elementwise_emulated.hpp"
#include "emulator/options.hpp"
#include "host_arrays.hpp"
#include "schedules.hpp"

#include "megacpp/backends/cpu.hpp"

namespace megacpp::cuda_emulation {
namespace {

template <class T>
using Outputs = std::vector<std::vector<T>>;

template <class T>
std::vector<T> draw(std::size_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  Rng rng(seed);
  return uniform<T>(n, rng, lo, hi);
}

// Maps: two operands on whole packets, a ragged length, an unaligned pointer; the accumulating
// product with the output aliasing an operand and a broadcast row of whole packets and of none;
// one operand.
template <class T, class Ops>
Outputs<T> maps() {
  std::vector<T> out = draw<T>(33 * 128, 1), a = draw<T>(33 * 128, 2), bias = draw<T>(128, 3);
  Ops::template map<T>(33, 128, fn::AccumulateOf<fn::Mul>{}, out.data(), In<T>{out.data()}, In<T>{a.data()}, In<T>{bias.data(), true});
  std::vector<T> ragged = draw<T>(7 * 31, 4), b = draw<T>(7 * 31, 5);
  Ops::template map<T>(7, 31, fn::Add{}, ragged.data(), In<T>{ragged.data()}, In<T>{b.data()});
  std::vector<T> shifted = draw<T>(4 * 32 + 1, 6), c = draw<T>(4 * 32 + 1, 7);
  Ops::template map<T>(4, 32, fn::Add{}, shifted.data() + 1, In<T>{shifted.data() + 1}, In<T>{c.data() + 1});
  std::vector<T> odd_rows = draw<T>(8 * 5, 8), bias5 = draw<T>(5, 9);  // 5: no whole packet in float or double
  Ops::template map<T>(8, 5, fn::AccumulateOf<fn::Mul>{}, odd_rows.data(), In<T>{odd_rows.data()}, In<T>{a.data()}, In<T>{bias5.data(), true});
  std::vector<T> squared = std::vector<T>(33 * 128, std::numeric_limits<T>::quiet_NaN());
  Ops::template map<T>(33, 128, fn::Relu2{}, squared.data(), In<T>{a.data()});
  return {out, ragged, shifted, odd_rows, squared};
}

// Appends the rounding an update wrote from element `offset` on, and convert's rounding of the
// updated values there (a NaN before `offset`, as the rounding's buffer was filled).
template <class T>
void record_rounding(std::vector<std::vector<bf16>>& roundings, const std::vector<bf16>& rounded, const std::vector<T>& values,
                     index_t offset) {
  std::vector<bf16> expected(values.size(), bf16::from_bits(0x7FC1));
  for (std::size_t i = static_cast<std::size_t>(offset); i < values.size(); ++i) expected[i] = convert_element<bf16>(values[i]);
  roundings.push_back(rounded);
  roundings.push_back(expected);
}

// AdamW's step over 1,000 elements (packets) and 1,001 from an unaligned pointer (elements), without
// and with the parameter's bf16 rounding written in the same pass (which leaves p, m, v as they were).
template <class T, class Ops>
Outputs<T> adamw(std::vector<std::vector<bf16>>* roundings = nullptr) {
  const fn::AdamWStep step{fn::Lerp{0.1}, fn::EmaSquare{0.95}, fn::AdamWUpdate{0.999, 1e-2, 0.3, 1e-8}};
  Outputs<T> outs;
  for (const bool rounds : {false, true})
    for (const auto& [n, offset] : {std::pair<index_t, index_t>{1000, 0}, {1001, 1}}) {
      const auto size = static_cast<std::size_t>(n + offset);
      std::vector<T> p = draw<T>(size, 10), m = draw<T>(size, 11), v = draw<T>(size, 12, 0.0, 1.0), g = draw<T>(size, 13);
      std::vector<bf16> rounded(size, bf16::from_bits(0x7FC1));  // a NaN where nothing is written
      Ops::template update_in_place<T>(n, step, p.data() + offset, m.data() + offset, v.data() + offset, g.data() + offset,
                                       rounds ? rounded.data() + offset : nullptr);
      outs.insert(outs.end(), {p, m, v});
      if (rounds && roundings) record_rounding(*roundings, rounded, p, offset);
    }
  return outs;
}

// Muon's weight update (the one-state form) over the same two shapes, without and with the bf16
// rounding.
template <class T, class Ops>
Outputs<T> muon(std::vector<std::vector<bf16>>* roundings = nullptr) {
  const fn::MuonStep step{fn::MuonUpdate{0.998, 0.03}};
  Outputs<T> outs;
  for (const bool rounds : {false, true})
    for (const auto& [n, offset] : {std::pair<index_t, index_t>{1000, 0}, {1001, 1}}) {
      const auto size = static_cast<std::size_t>(n + offset);
      std::vector<T> w = draw<T>(size, 14), o = draw<T>(size, 15);
      std::vector<bf16> rounded(size, bf16::from_bits(0x7FC1));  // a NaN where nothing is written
      Ops::template update_in_place<T>(n, step, w.data() + offset, o.data() + offset,
                                       rounds ? rounded.data() + offset : nullptr);
      outs.push_back(w);
      if (rounds && roundings) record_rounding(*roundings, rounded, w, offset);
    }
  return outs;
}

// expand with beta 0 over NaN and beta 0.5; copy_2d with padded rows (beta 0: the runtime's copies;
// beta 1: the kernel); transpose with beta 0 over NaN and beta 1.
template <class T, class Ops>
Outputs<T> layouts() {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> src = draw<T>(3 * 7, 20);
  std::vector<T> expanded(3 * 5 * 7, nan), expanded_into = draw<T>(3 * 5 * 7, 21);
  Ops::template expand<T>(3, 5, 7, T(0.25), src.data(), T(0), expanded.data());
  Ops::template expand<T>(3, 5, 7, T(2), src.data(), T(0.5), expanded_into.data());
  const std::vector<T> rows = draw<T>(6 * 11, 22);
  std::vector<T> copied(6 * 9, nan), added = draw<T>(6 * 9, 23), whole(6 * 11, nan);
  Ops::template copy_2d<T>(6, 7, rows.data(), 11, T(0), copied.data(), 9);
  Ops::template copy_2d<T>(6, 7, rows.data(), 11, T(1), added.data(), 9);
  Ops::template copy_2d<T>(6, 11, rows.data(), 11, T(0), whole.data(), 11);
  const std::vector<T> block = draw<T>(2 * 3 * 4 * 5 * 6, 24);
  std::vector<T> swapped(block.size(), nan), swapped_into = draw<T>(block.size(), 25);
  Ops::template transpose<T>(2, 3, 4, 5, 6, block.data(), T(0), swapped.data());
  Ops::template transpose<T>(2, 3, 4, 5, 6, block.data(), T(1), swapped_into.data());
  return {expanded, expanded_into, copied, added, whole, swapped, swapped_into};
}

// Fills: zero bytes (the runtime's memset), -0 (not zero bytes), a value on whole packets, a value
// from an unaligned pointer.
template <class T, class Ops>
Outputs<T> fills() {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> zeros(1000, nan), negative_zeros(1000, nan), values(1000, nan), shifted(1002, nan);
  Ops::template fill<T>(zeros.data(), 1000, T(0));
  Ops::template fill<T>(negative_zeros.data(), 1000, T(-0.0));
  Ops::template fill<T>(values.data(), 1000, T(1.5));
  Ops::template fill<T>(shifted.data() + 1, 1000, T(-2.25));
  return {zeros, negative_zeros, values, shifted};
}

// Conversions T -> bf16 -> T and T -> double, as vectors of 4 (every pointer aligned to its
// vector: 32 bytes for double, so the double buffers start at the first such element) and as single
// elements (from one element past it: unaligned, and a ragged length).
template <class T, class Ops>
Outputs<T> conversions() {
  Outputs<T> outs;
  const std::vector<T> values = draw<T>(1000, 30, -300.0, 300.0);
  const auto aligned_start = [](const auto& v) {  // the first element on a 32-byte boundary
    std::size_t i = 0;
    while (reinterpret_cast<std::uintptr_t>(v.data() + i) % 32 != 0) ++i;
    return i;
  };
  for (const auto& [n, unaligned] : {std::pair<std::size_t, std::size_t>{1000, 0}, {999, 1}}) {
    std::vector<T> x(1040, T(0));
    std::vector<bf16> half(1040);
    std::vector<T> back(1040, T(0));
    std::vector<double> wide(1040, 0.0);
    const std::size_t xs = aligned_start(x) + unaligned, hs = aligned_start(half) + unaligned,
                      bs = aligned_start(back) + unaligned, ws = aligned_start(wide) + unaligned;
    REQUIRE(std::max({xs, hs, bs, ws}) + n <= 1040);  // at most 15 elements (bf16) to a boundary, 1 past it
    std::copy(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n), x.begin() + static_cast<std::ptrdiff_t>(xs));
    Ops::template convert<T, bf16>(n, x.data() + xs, half.data() + hs);
    Ops::template convert<bf16, T>(n, half.data() + hs, back.data() + bs);
    Ops::template convert<T, double>(n, x.data() + xs, wide.data() + ws);
    outs.emplace_back(back.begin() + static_cast<std::ptrdiff_t>(bs), back.begin() + static_cast<std::ptrdiff_t>(bs + n));
    outs.emplace_back(wide.begin() + static_cast<std::ptrdiff_t>(ws), wide.begin() + static_cast<std::ptrdiff_t>(ws + n));
  }
  return outs;
}

template <class T>
struct ElementwiseCase {
  const char* name;
  Outputs<T> (*cpu)();
  Outputs<T> (*emulated)();
  bool bitwise;  // false: within rounding (multiply-adds fused differently)
};

template <class T>
std::vector<ElementwiseCase<T>> elementwise_cases() {
  return {
      {"maps: packets, ragged, unaligned, broadcast rows of whole packets and of none, aliasing", &maps<T, Cpu>,
       &maps<T, EmulatedElementwise>, false},
      {"AdamW's step: packets, and an unaligned ragged length; with the bf16 rounding", [] { return adamw<T, Cpu>(); },
       [] { return adamw<T, EmulatedElementwise>(); }, false},
      {"Muon's weight update in place: packets, and an unaligned ragged length; with the bf16 rounding",
       [] { return muon<T, Cpu>(); }, [] { return muon<T, EmulatedElementwise>(); }, false},
      {"expand, copy_2d (runtime copies and the kernel), transpose; beta 0 over NaN and beta != 0", &layouts<T, Cpu>,
       &layouts<T, EmulatedElementwise>, true},
      {"fills: zero bytes, -0, values on packets and unaligned", &fills<T, Cpu>, &fills<T, EmulatedElementwise>, true},
      {"conversions to and from bf16 and to double, as vectors of 4 and as elements", &conversions<T, Cpu>,
       &conversions<T, EmulatedElementwise>, true},
  };
}

template <class T>
void check_against_cpu() {
  const double tolerance = std::is_same_v<T, float> ? 2.5e-7 : 1e-15;
  for (const ElementwiseCase<T>& c : elementwise_cases<T>()) {
    INFO(c.name);
    const Outputs<T> got = c.emulated(), want = c.cpu();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i);
      const double error = scaled_error(got[i], want[i]);
      if (same_bits(got[i], want[i]))
        std::printf("  elementwise %s output %zu: the CPU's bits  (%s)\n", std::is_same_v<T, float> ? "float " : "double", i,
                    c.name);
      else
        std::printf("  elementwise %s output %zu: error %.2e  (%s)\n", std::is_same_v<T, float> ? "float " : "double", i,
                    error, c.name);
      if (c.bitwise) CHECK(same_bits(got[i], want[i]));
      else CHECK(error <= tolerance);
    }
  }
}

}  // namespace

// The rounding update_in_place writes with the parameter (Var::update_value) is convert's rounding
// of the new parameter, bit for bit, on packets and on an unaligned ragged length, and nothing
// outside the range is written: AdamW's three-state form and Muon's one-state form.
TEST_CASE("elementwise: AdamW's and Muon's bf16 rounding of the parameter on the emulator is convert's, bitwise",
          "[elementwise]") {
  std::vector<std::vector<bf16>> float_roundings, double_roundings;
  adamw<float, EmulatedElementwise>(&float_roundings);
  adamw<double, EmulatedElementwise>(&double_roundings);
  muon<float, EmulatedElementwise>(&float_roundings);
  muon<double, EmulatedElementwise>(&double_roundings);
  for (const auto* roundings : {&float_roundings, &double_roundings}) {
    REQUIRE(roundings->size() == 8);
    for (std::size_t c = 0; c < roundings->size(); c += 2) {
      const std::vector<bf16>&got = (*roundings)[c], &want = (*roundings)[c + 1];
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i);
        CHECK(got[i].bits == want[i].bits);
      }
    }
  }
}

// On the emulator itself, bit for bit: writing the rounding leaves AdamW's p, m, v and Muon's w as
// without it, and Muon's one-state update equals the map of fn::MuonUpdate it replaced.
template <class T>
void check_rounding_leaves_updates() {
  const Outputs<T> adamw_outs = adamw<T, EmulatedElementwise>(), muon_outs = muon<T, EmulatedElementwise>();
  REQUIRE(adamw_outs.size() == 12);  // (p, m, v) x 2 shapes, without then with the rounding
  for (std::size_t i = 0; i < 6; ++i) CHECK(same_bits(adamw_outs[i], adamw_outs[i + 6]));
  REQUIRE(muon_outs.size() == 4);
  for (std::size_t i = 0; i < 2; ++i) CHECK(same_bits(muon_outs[i], muon_outs[i + 2]));
  for (const auto& [n, offset] : {std::pair<index_t, index_t>{1000, 0}, {1001, 1}}) {
    const auto size = static_cast<std::size_t>(n + offset);
    std::vector<T> mapped = draw<T>(size, 14), stepped = mapped;
    const std::vector<T> o = draw<T>(size, 15);
    const fn::MuonUpdate update{0.998, 0.03};
    EmulatedElementwise::map<T>(1, n, update, mapped.data() + offset, In<T>{mapped.data() + offset}, In<T>{o.data() + offset});
    EmulatedElementwise::update_in_place<T>(n, fn::MuonStep{update}, stepped.data() + offset, o.data() + offset);
    CHECK(same_bits(mapped, stepped));
  }
}

TEST_CASE("elementwise: on the emulator, the bf16 rounding leaves the updates' bits; MuonStep is the map it replaced",
          "[elementwise]") {
  check_rounding_leaves_updates<float>();
  check_rounding_leaves_updates<double>();
}

TEST_CASE("elementwise: CUDA maps, updates, layouts, fills and conversions on the emulator match the CPU, float",
          "[elementwise]") {
  check_against_cpu<float>();
}

TEST_CASE("elementwise: CUDA maps, updates, layouts, fills and conversions on the emulator match the CPU, double",
          "[elementwise]") {
  check_against_cpu<double>();
}

// map_to_bf16 on backend `Ops`, each output in a buffer with a NaN-bits guard on both sides of its
// range: relu2 on whole packets; relu2's gradient (three operands) on whole packets; a ragged
// length; the output one bf16 past an 8-byte boundary and an operand one element past a packet's
// (the element path); none. Returns the outputs, guards included, then map-then-convert's roundings
// of the same (the reference, from the CPU backend's map and convert).
template <class T, class Ops>
std::vector<std::vector<bf16>> maps_to_bf16(std::vector<std::vector<bf16>>* reference) {
  const bf16 kGuard = bf16::from_bits(0x7fc1);
  const std::vector<T> u = draw<T>(1025, 21), g = draw<T>(1025, 22);
  const auto aligned = [](const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; };
  REQUIRE((aligned(u.data(), 16) && aligned(g.data(), 16)));  // the whole-packet cases do take the packet kernel
  std::vector<std::vector<bf16>> outs;
  const auto run = [&](index_t n, index_t out_offset, index_t in_offset, bool gradient) {
    std::vector<bf16> out(static_cast<std::size_t>(n + out_offset + 1), kGuard);
    REQUIRE(aligned(out.data(), 16));
    const T* ui = u.data() + in_offset;
    const T* gi = g.data() + in_offset;
    if (gradient) Ops::template map_to_bf16<T>(n, fn::Relu2Grad{}, out.data() + out_offset, gi, ui, ui);
    else Ops::template map_to_bf16<T>(n, fn::Relu2{}, out.data() + out_offset, ui);
    outs.push_back(out);
    std::vector<T> full(static_cast<std::size_t>(n));
    if (gradient) Cpu::map<T>(1, n, fn::Relu2Grad{}, full.data(), In<T>{gi}, In<T>{ui}, In<T>{ui});
    else Cpu::map<T>(1, n, fn::Relu2{}, full.data(), In<T>{ui});
    std::vector<bf16> want(out.size(), kGuard);
    Cpu::convert<T, bf16>(full.size(), full.data(), want.data() + out_offset);
    reference->push_back(want);
  };
  run(1024, 0, 0, false);
  run(1024, 0, 0, true);
  run(1001, 0, 0, true);
  run(1000, 1, 0, false);
  run(1000, 0, 1, true);
  run(0, 0, 0, true);
  return outs;
}

// The roundings are map-then-convert's, bit for bit, on the emulated CUDA kernels and on the CPU
// (the packet kernel's one 8-byte store of four roundings included), and nothing outside the range
// is written.
TEST_CASE("elementwise: map_to_bf16 on the emulator and the CPU is map then convert, bitwise, float and double",
          "[elementwise]") {
  const auto check = [](const std::vector<std::vector<bf16>>& got, const std::vector<std::vector<bf16>>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t c = 0; c < got.size(); ++c) {
      INFO("case " << c);
      REQUIRE(got[c].size() == want[c].size());
      for (std::size_t i = 0; i < got[c].size(); ++i) {
        INFO("element " << i);
        CHECK(got[c][i].bits == want[c][i].bits);
      }
    }
  };
  std::vector<std::vector<bf16>> reference;
  check(maps_to_bf16<float, EmulatedElementwise>(&reference), reference);
  reference.clear();
  check(maps_to_bf16<float, Cpu>(&reference), reference);
  reference.clear();
  check(maps_to_bf16<double, EmulatedElementwise>(&reference), reference);
  reference.clear();
  check(maps_to_bf16<double, Cpu>(&reference), reference);
}

TEST_CASE("elementwise: the index range check (minmax_index) matches the CPU's, under either schedule", "[elementwise]") {
  // 5 ids; 100,000 (several blocks, the extremes in different blocks and not at the ends); one id;
  // negative ids; none.
  std::vector<std::int32_t> many(100000);
  Rng rng(40);
  for (std::int32_t& id : many) id = static_cast<std::int32_t>(rng.below(50000)) + 7;
  many[31337] = 3;
  many[77777] = 60000;
  const std::vector<std::vector<std::int32_t>> cases{{4, 9, 0, 2, 9}, many, {42}, {-5, 3, -70000, 12}, {}};
  for (bool reversed : {false, true}) {
    Options schedule = options();
    schedule.reverse_schedule = reversed;
    const OptionsScope scope(schedule);
    for (const std::vector<std::int32_t>& ids : cases) {
      INFO(ids.size() << " ids, reversed schedule " << reversed);
      const auto n = static_cast<index_t>(ids.size());
      CHECK(EmulatedElementwise::minmax_index(n, ids.data()) == Cpu::minmax_index(n, ids.data()));
    }
  }
}

// copy_from_host (memory.cuh) of n elements of T into dst + offset elements: the payload's bytes
// land exactly and the bytes around the destination stay. Through launches of kInlineUploadBytes
// up to the limit (the last launch partial or whole), one byte more through the copy.
template <class T>
void check_upload(std::size_t n, std::size_t offset) {
  INFO(n << " elements of " << sizeof(T) << " bytes at element offset " << offset);
  std::vector<unsigned char> source_bytes(n * sizeof(T)), device_bytes((n + offset + 3) * sizeof(T), 0xA5);
  Rng rng(n * 7 + offset);
  for (unsigned char& b : source_bytes) b = static_cast<unsigned char>(rng.below(256));
  std::vector<T> source(n);
  if (n) std::memcpy(static_cast<void*>(source.data()), source_bytes.data(), source_bytes.size());  // no null memcpy
  const std::vector<unsigned char> untouched = device_bytes;
  T* dst = reinterpret_cast<T*>(device_bytes.data()) + offset;
  EmulatedElementwise::copy_from_host<T>(dst, source.data(), n);
  const std::size_t begin = offset * sizeof(T), end = begin + n * sizeof(T);
  CHECK(std::equal(source_bytes.begin(), source_bytes.end(), device_bytes.begin() + static_cast<std::ptrdiff_t>(begin)));
  CHECK(std::equal(device_bytes.begin(), device_bytes.begin() + static_cast<std::ptrdiff_t>(begin), untouched.begin()));
  CHECK(std::equal(device_bytes.begin() + static_cast<std::ptrdiff_t>(end), device_bytes.end(),
                   untouched.begin() + static_cast<std::ptrdiff_t>(end)));
}

TEST_CASE("elementwise: host-to-device copies up to the limit travel as launches' parameters, exactly, any size",
          "[elementwise]") {
  const std::size_t part = EmulatedElementwise::inline_upload_bytes(), limit = EmulatedElementwise::inline_upload_limit();
  REQUIRE(part % 16 == 0);
  REQUIRE(limit % part == 0);
  for (std::size_t offset : {0, 1, 3}) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{3}, std::size_t{255}, std::size_t{256}, std::size_t{257},
                              part - 1, part, part + 1, 2 * part, 5 * part - 7, limit - 1, limit, limit + 1})
      check_upload<unsigned char>(bytes, offset);
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, part / 4 - 1, part / 4, part / 4 + 1, limit / 4, limit / 4 + 1}) {
      check_upload<float>(n, offset);
      check_upload<std::int32_t>(n, offset);
    }
    for (std::size_t n : {std::size_t{1}, part / 8 + 1, limit / 8, limit / 8 + 1}) check_upload<double>(n, offset);
    for (std::size_t n : {std::size_t{5}, part / 2 + 1, limit / 2, limit / 2 + 1}) check_upload<bf16>(n, offset);
  }
  check_upload<float>(0, 0);
  check_same_bits_under_schedules([part] {
    std::vector<float> source(3 * part / 4 + 5), dst(source.size(), -1.0f);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i) * 0.5f - 3.0f;
    EmulatedElementwise::copy_from_host<float>(dst.data(), source.data(), source.size());
    return std::vector<std::vector<float>>{dst};
  });
}

template <class T>
void check_schedules() {
  for (const ElementwiseCase<T>& c : elementwise_cases<T>()) {
    INFO(c.name);
    check_same_bits_under_schedules(c.emulated);
  }
}

TEST_CASE("elementwise: the same bits run to run and under reversed and greedy schedules, float and double", "[elementwise]") {
  check_schedules<float>();
  check_schedules<double>();
}

}  // namespace megacpp::cuda_emulation
