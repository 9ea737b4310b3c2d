// CPU backend: transcendental loops (exp, tanh) on Eigen's SIMD packets.
//
// Why not Eigen array expressions: an assignment to an unaligned map peels its first elements
// to align the destination and runs them through the scalar function (std::exp), whose rounding
// differs from the packet function's, so a row's values would depend on its address. Here every
// element goes through the packet function: the tail is padded into one packet. A row's result
// is therefore the same wherever it lives (pack == alone stays bitwise), and sums run in a fixed
// order (one packet accumulator, then its lanes, then the tail in order).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <limits>

#include "megacpp/backends/cpu/detail/eigen.hpp"
#include "megacpp/core/config.hpp"

namespace megacpp::cpu {

template <class T>
using Packet = typename Eigen::internal::packet_traits<T>::type;
template <class T>
inline constexpr index_t kPacketLanes = Eigen::internal::unpacket_traits<Packet<T>>::size;

// out[i] = f(a[i], b[i]) for packets a, b (b may be null: f receives a zero packet). out may
// alias a or b.
template <class T, class F>
void packet_map(index_t n, const T* a, const T* b, T* out, F f) {
  namespace ei = Eigen::internal;
  constexpr index_t L = kPacketLanes<T>;
  const Packet<T> zero = ei::pset1<Packet<T>>(T(0));
  index_t i = 0;
  for (; i + L <= n; i += L) ei::pstoreu(out + i, f(ei::ploadu<Packet<T>>(a + i), b ? ei::ploadu<Packet<T>>(b + i) : zero));
  if (i == n) return;
  alignas(64) T pa[L] = {}, pb[L] = {};
  std::copy(a + i, a + n, pa);
  if (b) std::copy(b + i, b + n, pb);
  ei::pstoreu(pa, f(ei::ploadu<Packet<T>>(pa), ei::ploadu<Packet<T>>(pb)));
  std::copy(pa, pa + (n - i), out + i);
}

// sum_i exp(x[i] - shift), through Eigen's packet exp.
template <class T>
T exp_sum(index_t n, const T* x, T shift) {
  namespace ei = Eigen::internal;
  constexpr index_t L = kPacketLanes<T>;
  const Packet<T> s = ei::pset1<Packet<T>>(shift);
  Packet<T> acc = ei::pset1<Packet<T>>(T(0));
  index_t i = 0;
  for (; i + L <= n; i += L) acc = ei::padd(acc, ei::pexp(ei::psub(ei::ploadu<Packet<T>>(x + i), s)));
  T total = ei::predux(acc);
  if (i < n) {
    alignas(64) T tail[L] = {};
    std::copy(x + i, x + n, tail);
    ei::pstoreu(tail, ei::pexp(ei::psub(ei::ploadu<Packet<T>>(tail), s)));
    for (index_t j = 0; j < n - i; ++j) total += tail[j];
  }
  return total;
}

// sum_i a[i] b[i] (c[i] when c is not null) on packets, in a fixed order (one packet
// accumulator, the tail padded with zeros into it, then its lanes): a row's sum does not depend
// on its address. The scalar loop is one add chain (~4 cycles an element; GCC may not reorder it).
template <class T>
T packet_dot(index_t n, const T* a, const T* b, const T* c = nullptr) {
  namespace ei = Eigen::internal;
  using P = Packet<T>;
  constexpr index_t L = kPacketLanes<T>;
  P acc = ei::pset1<P>(T(0));
  index_t i = 0;
  for (; i + L <= n; i += L) {
    const P ab = c ? ei::pmul(ei::ploadu<P>(a + i), ei::ploadu<P>(c + i)) : ei::ploadu<P>(a + i);
    acc = ei::pmadd(ab, ei::ploadu<P>(b + i), acc);
  }
  if (i < n) {
    alignas(64) T ta[L] = {}, tb[L] = {}, tc[L] = {};
    std::copy(a + i, a + n, ta);
    std::copy(b + i, b + n, tb);
    if (c) std::copy(c + i, c + n, tc);
    const P ab = c ? ei::pmul(ei::pload<P>(ta), ei::pload<P>(tc)) : ei::pload<P>(ta);
    acc = ei::pmadd(ab, ei::pload<P>(tb), acc);
  }
  return ei::predux(acc);
}

// max_i x[i] on packets (the scalar loop is one compare chain, ~4 cycles an element). The
// maximum does not depend on the order it is taken in, so this equals the scalar row_max on
// rows without NaN (a row with NaN gives a NaN loss either way).
template <class T>
T packet_max(index_t n, const T* x) {
  namespace ei = Eigen::internal;
  constexpr index_t L = kPacketLanes<T>;
  Packet<T> acc = ei::pset1<Packet<T>>(-std::numeric_limits<T>::infinity());
  index_t i = 0;
  for (; i + L <= n; i += L) acc = ei::pmax(acc, ei::ploadu<Packet<T>>(x + i));
  T m = ei::predux_max(acc);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// y = cap * tanh(x / cap) (softcap) on packets where Eigen vectorises tanh (fp32), else std::tanh.
template <class T>
void softcap_rows(index_t n, const T* x, T cap, T* y) {
  namespace ei = Eigen::internal;
  if constexpr (ei::packet_traits<T>::HasTanh) {
    const Packet<T> c = ei::pset1<Packet<T>>(cap), inv = ei::pset1<Packet<T>>(T(1) / cap);
    packet_map<T>(n, x, nullptr, y, [&](Packet<T> v, Packet<T>) { return ei::pmul(c, ei::ptanh(ei::pmul(v, inv))); });
  } else {
    for (index_t i = 0; i < n; ++i) y[i] = cap * std::tanh(x[i] / cap);
  }
}

}  // namespace megacpp::cpu
