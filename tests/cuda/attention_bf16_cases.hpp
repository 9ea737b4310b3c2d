// tests/cuda/attention_bf16_cases.hpp: the cases and the double-precision reference of the bf16
// tensor-core attention (CudaBf16Attention, backends/cuda/detail/attention_mma.cuh).
//
// Plain host C++ (no backend, no test framework): the CUDA test runs the cases on the GPU, and
// tests/cuda_emulation on the host emulation of the same device code, and both compare with this
// reference. The reference is written from the contract, not from the kernel:
// dense loops over each document's visible (query, key) pairs in double, on q, k, v and dO rounded
// to bf16 as the kernel stages them. P and dS are rounded to bf16 where the kernel rounds them
// when `round_products` is set (the kernel's own rounding points), and kept exact otherwise (what
// an fp32 kernel computes on bf16 inputs: the comparison the tolerance below is derived for).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/kernels/attention_tiling.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::attention_bf16_test {

// The tolerances of a case against reference_forward / reference_backward with exact P and dS
// (derived in attention_bf16_checks.hpp; tests/cuda_emulation applies the same ones).
inline constexpr double kOutputTolerance = 1e-2;    // o, relative to max |o|: 2.5 bf16 unit roundoffs
inline constexpr double kGradientTolerance = 1e-2;  // dq, dk, dv, relative to their max: 2.5 unit roundoffs
inline constexpr double kLseTolerance = 1e-5;       // lse, relative to max |lse|: fp32 sums of exact P

/// One problem: shapes, documents per row (tokens in no span are padding) and options.
struct Problem {
  std::string name;
  index_t batch = 0, seq = 0, heads = 0, kv_heads = 0, dim = 0;
  std::vector<std::vector<DocumentSpan>> spans;  ///< per row, in order
  double scale = 0.0;    ///< 0: 1 / sqrt(dim)
  double softcap = 0.0;  ///< 0: none
  index_t window = 0;    ///< 0: none
  double q_std = 1.0;    ///< q ~ N(0, q_std^2): larger gives peakier softmax rows
  double resolved_scale() const { return scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(dim)); }
};

/// Spans of back-to-back documents of the given lengths from token 0 (a row whose first document
/// began in an earlier row looks the same to the kernel: a span at 0).
inline std::vector<DocumentSpan> packed(const std::vector<index_t>& lengths) {
  std::vector<DocumentSpan> spans;
  index_t at = 0;
  for (index_t len : lengths) {
    spans.push_back({at, len});
    at += len;
  }
  return spans;
}

/// The cases: several documents per row (1-token ones, one over several 64-token tiles, lengths
/// not multiples of 16), a row starting mid-document, GQA 4 : 2 and 4 : 1, window, softcap, scale,
/// padding tokens, head_dim 64, 128 and padded ones (50: no float4 loads; 80; 8; 32).
inline std::vector<Problem> problems() {
  std::vector<Problem> out;
  out.push_back({"d64, GQA 4:2, 2 rows of 200: documents of 37, 1, 150, 12; 70 (mid-document start), 130", 2, 200, 4, 2, 64,
                 {packed({37, 1, 150, 12}), packed({70, 130})}});
  out.push_back({"d128, GQA 4:2, window 40, softcap 30, same documents", 2, 200, 4, 2, 128,
                 {packed({37, 1, 150, 12}), packed({70, 130})}, 0.0, 30.0, 40});
  out.push_back({"d128, MHA 2:2, padding between documents (spans 3+90, 100+77; 0+33, 40+160), scale 0.2, q std 3", 2,
                 200, 2, 2, 128, {{{3, 90}, {100, 77}}, {{0, 33}, {40, 160}}}, 0.2, 0.0, 0, 3.0});
  out.push_back({"d50 (padded to 64, scalar loads), GQA 4:1, window 100, softcap 5, a 230-token document", 1, 240, 4, 1, 50,
                 {{{5, 230}}}, 0.0, 5.0, 100});
  out.push_back({"d80 (padded to 128), GQA 2:1, documents of 129, 64, 17, padding at the end", 1, 220, 2, 1, 80,
                 {packed({129, 64, 17})}});
  out.push_back({"d8 (padded to 64), MHA 2:2, 8 documents of 20", 1, 160, 2, 2, 8, {packed({20, 20, 20, 20, 20, 20, 20, 20})}});
  out.push_back({"d32 (padded to 64), GQA 4:2, window 7, softcap 2, q std 2", 2, 100, 4, 2, 32,
                 {packed({99, 1}), packed({51, 49})}, 0.0, 2.0, 7, 2.0});
  return out;
}

/// True for each (row, token) covered by no span: padding (o = 0, lse = -inf, no gradient).
inline std::vector<bool> padding_tokens(const Problem& p) {
  std::vector<bool> pad(static_cast<std::size_t>(p.batch * p.seq), true);
  for (index_t b = 0; b < p.batch; ++b)
    for (const DocumentSpan& s : p.spans[static_cast<std::size_t>(b)])
      for (index_t t = s.start; t < s.start + s.length; ++t) pad[static_cast<std::size_t>(b * p.seq + t)] = false;
  return pad;
}

/// fp32 inputs: q, grad_o (batch, seq, heads, dim); k, v (batch, seq, kv_heads, dim).
struct Inputs {
  std::vector<float> q, k, v, grad_o;
};

inline Inputs make_inputs(const Problem& p, std::uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](index_t heads, double std) {
    std::vector<float> x(static_cast<std::size_t>(p.batch * p.seq * heads * p.dim));
    for (float& e : x) e = static_cast<float>(std * rng.normal());
    return x;
  };
  Inputs in;
  in.q = draw(p.heads, p.q_std);
  in.k = draw(p.kv_heads, 1.0);
  in.v = draw(p.kv_heads, 1.0);
  in.grad_o = draw(p.heads, 1.0);
  return in;
}

inline float round_bf16(float x) { return static_cast<float>(bf16(x)); }
inline std::vector<float> round_bf16(std::vector<float> x) {
  for (float& e : x) e = round_bf16(e);
  return x;
}
/// The inputs as the kernel stages them: every element rounded to bf16 (round to nearest even).
inline Inputs rounded(const Inputs& in) { return {round_bf16(in.q), round_bf16(in.k), round_bf16(in.v), round_bf16(in.grad_o)}; }

struct Forward {
  std::vector<double> o, lse;  // (batch, seq, heads, dim), (batch, seq, heads); padding: 0, -inf
};
struct Gradients {
  std::vector<double> dq, dk, dv;  // like q, k, v; padding: 0
};

namespace detail {
// Calls f(b, span start, span length) for every document of every row.
template <class F>
void for_each_document(const Problem& p, F&& f) {
  for (index_t b = 0; b < p.batch; ++b)
    for (const DocumentSpan& s : p.spans[static_cast<std::size_t>(b)]) f(b, s.start, s.length);
}
inline double maybe_round(double x, bool round) { return round ? round_bf16(static_cast<float>(x)) : x; }

// The scores of query i of head h against the document's keys (positions from `start`): capped,
// -inf where not visible; also tanh(s / cap) per key for the backward (0 without a cap).
inline void scores(const Problem& p, const Inputs& in, index_t b, index_t start, index_t len, index_t h, index_t i,
                   std::vector<double>& s, std::vector<double>& t) {
  const index_t kvh = h / (p.heads / p.kv_heads), d = p.dim;
  const float* qi = &in.q[static_cast<std::size_t>(((b * p.seq + start + i) * p.heads + h) * d)];
  s.assign(static_cast<std::size_t>(len), -std::numeric_limits<double>::infinity());
  t.assign(static_cast<std::size_t>(len), 0.0);
  for (index_t j = 0; j < len; ++j) {
    if (!attention::visible(i, j, p.window)) continue;
    const float* kj = &in.k[static_cast<std::size_t>(((b * p.seq + start + j) * p.kv_heads + kvh) * d)];
    double dot = 0;
    for (index_t e = 0; e < d; ++e) dot += static_cast<double>(qi[e]) * kj[e];
    double x = p.resolved_scale() * dot;
    if (p.softcap > 0) {
      t[static_cast<std::size_t>(j)] = std::tanh(x / p.softcap);
      x = p.softcap * t[static_cast<std::size_t>(j)];
    }
    s[static_cast<std::size_t>(j)] = x;
  }
}
}  // namespace detail

/// o and lse on `in` (already rounded): P = exp(S - max), l = sum P, o = sum r(P) v / l, where r
/// rounds to bf16 when round_products is set (the kernel rounds P before P V; l sums exact P).
inline Forward reference_forward(const Problem& p, const Inputs& in, bool round_products) {
  Forward f;
  f.o.assign(static_cast<std::size_t>(p.batch * p.seq * p.heads * p.dim), 0.0);
  f.lse.assign(static_cast<std::size_t>(p.batch * p.seq * p.heads), -std::numeric_limits<double>::infinity());
  std::vector<double> s, t;
  detail::for_each_document(p, [&](index_t b, index_t start, index_t len) {
    for (index_t h = 0; h < p.heads; ++h) {
      const index_t kvh = h / (p.heads / p.kv_heads);
      for (index_t i = 0; i < len; ++i) {
        detail::scores(p, in, b, start, len, h, i, s, t);
        const double m = *std::max_element(s.begin(), s.end());
        double l = 0;
        const std::size_t row = static_cast<std::size_t>((b * p.seq + start + i) * p.heads + h);
        for (index_t j = 0; j < len; ++j) {
          if (s[static_cast<std::size_t>(j)] == -std::numeric_limits<double>::infinity()) continue;
          const double pj = std::exp(s[static_cast<std::size_t>(j)] - m);
          l += pj;
          const double used = detail::maybe_round(pj, round_products);
          const float* vj = &in.v[static_cast<std::size_t>(((b * p.seq + start + j) * p.kv_heads + kvh) * p.dim)];
          for (index_t e = 0; e < p.dim; ++e) f.o[row * static_cast<std::size_t>(p.dim) + static_cast<std::size_t>(e)] += used * vj[e];
        }
        for (index_t e = 0; e < p.dim; ++e) f.o[row * static_cast<std::size_t>(p.dim) + static_cast<std::size_t>(e)] /= l;
        f.lse[row] = m + std::log(l);
      }
    }
  });
  return f;
}

/// dq, dk, dv on `in` (already rounded) given the forward's o and lse (the backward's inputs, as
/// the contract's backward takes them): D = rowsum(dO o O), P = exp(S - LSE), dP = dO V^T,
/// dS = P (dP - D)(1 - tanh^2); dV = r(P)^T dO, dK = scale r(dS)^T q, dQ = scale r(dS) k.
template <class O>
Gradients reference_backward(const Problem& p, const Inputs& in, const std::vector<O>& o, const std::vector<O>& lse,
                             bool round_products) {
  Gradients g;
  g.dq.assign(in.q.size(), 0.0);
  g.dk.assign(in.k.size(), 0.0);
  g.dv.assign(in.v.size(), 0.0);
  const double scale = p.resolved_scale();
  const std::size_t d = static_cast<std::size_t>(p.dim);
  std::vector<double> s, t;
  detail::for_each_document(p, [&](index_t b, index_t start, index_t len) {
    for (index_t h = 0; h < p.heads; ++h) {
      const index_t kvh = h / (p.heads / p.kv_heads);
      for (index_t i = 0; i < len; ++i) {
        const std::size_t row = static_cast<std::size_t>((b * p.seq + start + i) * p.heads + h);
        double drow = 0;
        for (std::size_t e = 0; e < d; ++e) drow += static_cast<double>(in.grad_o[row * d + e]) * static_cast<double>(o[row * d + e]);
        detail::scores(p, in, b, start, len, h, i, s, t);
        for (index_t j = 0; j < len; ++j) {
          if (s[static_cast<std::size_t>(j)] == -std::numeric_limits<double>::infinity()) continue;
          const std::size_t kv_row = static_cast<std::size_t>((b * p.seq + start + j) * p.kv_heads + kvh);
          double dp = 0;
          for (std::size_t e = 0; e < d; ++e) dp += static_cast<double>(in.grad_o[row * d + e]) * in.v[kv_row * d + e];
          const double pij = std::exp(s[static_cast<std::size_t>(j)] - static_cast<double>(lse[row]));
          const double tj = t[static_cast<std::size_t>(j)];
          const double ds = pij * (dp - drow) * (p.softcap > 0 ? 1.0 - tj * tj : 1.0);
          const double p_used = detail::maybe_round(pij, round_products), ds_used = detail::maybe_round(ds, round_products);
          for (std::size_t e = 0; e < d; ++e) {
            g.dv[kv_row * d + e] += p_used * in.grad_o[row * d + e];
            g.dk[kv_row * d + e] += scale * ds_used * in.q[row * d + e];
            g.dq[row * d + e] += scale * ds_used * in.k[kv_row * d + e];
          }
        }
      }
    }
  });
  return g;
}

/// max |got - want| / max |want| over the finite elements (a tensor's error at its own scale);
/// -inf must meet -inf exactly (padding lse), and a NaN anywhere is an error of +inf.
template <class A, class B>
double normwise_error(const std::vector<A>& got, const std::vector<B>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (std::isnan(g)) return std::numeric_limits<double>::infinity();
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(g - w));
    scale = std::max(scale, std::abs(w));
  }
  return scale > 0 ? worst / scale : worst;
}

}  // namespace megacpp::attention_bf16_test
