// CPU backend: functor-driven elementwise maps, axis reductions, broadcasts and copies.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "megacpp/backends/cpu/detail/packet_math.hpp"
#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/backend.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/functors.hpp"

namespace megacpp::cpu {

template <class T>
inline const T& operand_at(const In<T>& in, index_t flat, index_t col) {
  return in.broadcast ? in.data[col] : in.data[flat];
}

// out[r, c] = f(ins[r, c]...), broadcast operands read ins[c]. `out` may alias a full operand.
template <class T, class F, class... Ins>
void map(index_t rows, index_t cols, F f, T* out, Ins... ins) {
  const index_t n = rows * cols;
  if (!(ins.broadcast || ...)) {
    if constexpr (std::is_same_v<F, fn::Softcap> && sizeof...(Ins) == 1) {
      // the head's softcap over (tokens, vocab) logits: on SIMD packets (packet_math.hpp)
      parallel_chunks(n, 20, [&](index_t begin, index_t end) {
        softcap_rows<T>(end - begin, (ins.data + begin)..., static_cast<T>(f.cap), out + begin);
      });
      return;
    }
    parallel_chunks(n, 1, [&](index_t begin, index_t end) {
      for (index_t i = begin; i < end; ++i) out[i] = f(ins.data[i]...);
    });
    return;
  }
  parallel_for(rows, cols, [&](index_t r) {
    T* o = out + r * cols;
    for (index_t c = 0; c < cols; ++c) o[c] = f(operand_at(ins, r * cols + c, c)...);
  });
}

// out[i] = f(ins[i]...) rounded to bf16 as convert rounds it (nearest even), for i < n: a
// product's bf16 operand made in the pass that computes it, where map then convert would write
// the full-precision result and read it back (relu2_linear.hpp's hidden activation and its
// gradient). The same bits as map followed by convert.
template <class T, class F, class... Ins>
void map_to_bf16(index_t n, F f, bf16* out, const Ins*... ins) {
  static_assert((std::is_same_v<Ins, T> && ...), "map_to_bf16: every operand is a T");
  parallel_chunks(n, 8, [&](index_t begin, index_t end) {
    for (index_t i = begin; i < end; ++i) out[i] = convert_element<bf16>(static_cast<T>(f(ins[i]...)));
  });
}

// f(a[i], b[i], c[i], x[i]) for i < n, f updating a, b, c in place: an optimiser step in one pass
// over its state (AdamW's parameter and two moments from the gradient: fn::AdamWStep). With
// `a_rounded`, also a_rounded[i] = the new a[i] rounded to bf16 as convert rounds it (nearest
// even): the parameter's copy for mixed-precision products, written in the same pass (Var::update_value).
template <class T, class F>
void update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded = nullptr) {
  parallel_chunks(n, 8, [&](index_t begin, index_t end) {
    if (a_rounded) {
      for (index_t i = begin; i < end; ++i) {
        f(a[i], b[i], c[i], x[i]);
        a_rounded[i] = convert_element<bf16>(a[i]);
      }
    } else {
      for (index_t i = begin; i < end; ++i) f(a[i], b[i], c[i], x[i]);
    }
  });
}

// The one-state form: f(a[i], x[i]) updating a in place (Muon's weight update: fn::MuonStep), and
// a_rounded[i] = bf16(a[i]) when asked, as above.
template <class T, class F>
void update_in_place(index_t n, F f, T* a, const T* x, bf16* a_rounded = nullptr) {
  parallel_chunks(n, 8, [&](index_t begin, index_t end) {
    if (a_rounded) {
      for (index_t i = begin; i < end; ++i) {
        f(a[i], x[i]);
        a_rounded[i] = convert_element<bf16>(a[i]);
      }
    } else {
      for (index_t i = begin; i < end; ++i) f(a[i], x[i]);
    }
  });
}

// out[o, i] = beta * out[o, i] + scale * sum_j f(ins[o, j, i]...), for x viewed as
// (outer, n, inner); broadcast operands read ins[i]. Sums run in j order in double, one
// output per thread: the result is independent of the thread count.
template <class T, class F, class... Ins>
void reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
  constexpr index_t kBlock = 64;  // inner columns summed together (vectorisable, cache-friendly)
  const index_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, n * std::min(inner, kBlock), [&](index_t ob) {
    const index_t o = ob / blocks;
    const index_t i0 = (ob % blocks) * kBlock;
    const index_t width = std::min(kBlock, inner - i0);
    double acc[kBlock] = {};
    for (index_t j = 0; j < n; ++j) {
      const index_t base = (o * n + j) * inner + i0;
      for (index_t i = 0; i < width; ++i) acc[i] += static_cast<double>(f(operand_at(ins, base + i, i0 + i)...));
    }
    T* dst = out + o * inner + i0;
    for (index_t i = 0; i < width; ++i) {
      const T s = static_cast<T>(static_cast<double>(scale) * acc[i]);
      dst[i] = beta == T(0) ? s : beta * dst[i] + s;
    }
  });
}

// dst[o, j, i] = beta * dst[o, j, i] + scale * src[o, i]  (the backward of a sum over j).
template <class T>
void expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
  parallel_for(outer * n, inner, [&](index_t oj) {
    const T* s = src + (oj / n) * inner;
    T* d = dst + oj * inner;
    for (index_t i = 0; i < inner; ++i) d[i] = beta == T(0) ? scale * s[i] : beta * d[i] + scale * s[i];
  });
}

// dst[r, :cols] = beta * dst[r, :cols] + src[r, :cols] with row strides (slice, concat).
template <class T>
void copy_2d(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld) {
  parallel_for(rows, cols, [&](index_t r) {
    const T* s = src + r * src_ld;
    T* d = dst + r * dst_ld;
    if (beta == T(0)) std::memcpy(d, s, static_cast<std::size_t>(cols) * sizeof(T));
    else for (index_t c = 0; c < cols; ++c) d[c] = beta * d[c] + s[c];
  });
}

// Swaps two axes: src (outer, d0, mid, d1, inner) -> dst (outer, d1, mid, d0, inner),
// dst = beta * dst + permuted src.
template <class T>
void transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src,
               T beta, T* dst) {
  parallel_for(outer * d1 * mid, d0 * inner, [&](index_t row) {
    const index_t m = row % mid;
    const index_t b = (row / mid) % d1;
    const index_t o = row / (mid * d1);
    for (index_t a = 0; a < d0; ++a) {
      const T* s = src + (((o * d0 + a) * mid + m) * d1 + b) * inner;
      T* d = dst + (((o * d1 + b) * mid + m) * d0 + a) * inner;
      for (index_t i = 0; i < inner; ++i) d[i] = beta == T(0) ? s[i] : beta * d[i] + s[i];
    }
  });
}

template <class From, class To>
void convert(std::size_t n, const From* src, To* dst) {
  parallel_chunks(static_cast<index_t>(n), 1, [&](index_t begin, index_t end) {
    for (index_t i = begin; i < end; ++i) dst[i] = convert_element<To>(src[i]);
  });
}

template <class T>
void fill(T* dst, std::size_t n, T value) {
  parallel_chunks(static_cast<index_t>(n), 1, [&](index_t begin, index_t end) {
    std::fill(dst + begin, dst + end, value);
  });
}

inline std::pair<std::int32_t, std::int32_t> minmax_index(index_t n, const std::int32_t* idx) {
  std::int32_t lo = std::numeric_limits<std::int32_t>::max();
  std::int32_t hi = std::numeric_limits<std::int32_t>::min();
  for (index_t i = 0; i < n; ++i) {
    lo = std::min(lo, idx[i]);
    hi = std::max(hi, idx[i]);
  }
  return {lo, hi};
}

}  // namespace megacpp::cpu
