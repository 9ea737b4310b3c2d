// Kernel cases of the SsmRotary contract (megacpp/core/kernels/ssm_rotary.hpp), reached through
// rotary_angles and rotary_qk (megacpp/nn/mamba/rotary.hpp). No op-level reference exists, so the
// reference is a literal host loop in double, forward and backward, written from the formulas:
//
//   theta_t = theta_{t-1} + pi tanh(angle_t) dt_t,  theta = 0 before a document's first token
//   cossin  = (cos theta, sin theta)                                   (batch, seq, heads, S, 2)
//   u = x + bias_h;  (y_2i, y_2i+1) = (u_2i c - u_2i+1 s, u_2i s + u_2i+1 c) for i < S, y_n = u_n after
//
// theta is not wrapped to [0, 2 pi) here (the kernels wrap it; cos and sin do not see the
// difference), so the reference shares no code with the kernels beyond the document rule.
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <cmath>
#include <numbers>
#include <vector>

#include "support/kernel_case.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/nn/mamba/rotary.hpp"

namespace megacpp::testing {

namespace rotary_reference {

using Values = std::vector<double>;

// Sizes of a rotary problem: rows, tokens, heads, angles S, rank R, d_state N.
struct Dims {
  index_t batch, seq, heads, S, R, N;
};

// cossin (batch, seq, heads, S, 2) from angle (batch, seq, S) and dt (batch, seq, heads).
template <Backend B>
Values angles(const Dims& d, const DocumentLayout<B>& docs, const Values& angle, const Values& dt) {
  Values cossin(static_cast<std::size_t>(d.batch * d.seq * d.heads * d.S * 2));
  for (index_t b = 0; b < d.batch; ++b)
    for (index_t h = 0; h < d.heads; ++h)
      for (index_t i = 0; i < d.S; ++i) {
        double theta = 0;
        for (index_t t = 0; t < d.seq; ++t) {
          if (t == 0 || !docs.same_document(b, t - 1, t)) theta = 0;
          const index_t bt = b * d.seq + t;
          theta += std::numbers::pi * std::tanh(angle[bt * d.S + i]) * dt[bt * d.heads + h];
          const index_t at = (bt * d.heads + h) * d.S + i;
          cossin[2 * at] = std::cos(theta);
          cossin[2 * at + 1] = std::sin(theta);
        }
      }
  return cossin;
}

// Adds dangle and ddt given dcossin: dL/dtheta_t = -sin dcos + cos dsin, summed backwards over the
// document's later tokens (theta_t depends on every earlier token of its document).
template <Backend B>
void angles_backward(const Dims& d, const DocumentLayout<B>& docs, const Values& angle, const Values& dt,
                     const Values& cossin, const Values& dcossin, Values& dangle, Values& ddt) {
  for (index_t b = 0; b < d.batch; ++b)
    for (index_t h = 0; h < d.heads; ++h)
      for (index_t i = 0; i < d.S; ++i) {
        double later = 0;  // sum of dL/dtheta over tokens t..end of t's document
        for (index_t t = d.seq - 1; t >= 0; --t) {
          if (t + 1 < d.seq && !docs.same_document(b, t, t + 1)) later = 0;
          const index_t bt = b * d.seq + t, at = (bt * d.heads + h) * d.S + i;
          later += -cossin[2 * at + 1] * dcossin[2 * at] + cossin[2 * at] * dcossin[2 * at + 1];
          const double tanh_a = std::tanh(angle[bt * d.S + i]);
          dangle[bt * d.S + i] += later * std::numbers::pi * (1 - tanh_a * tanh_a) * dt[bt * d.heads + h];
          ddt[bt * d.heads + h] += later * std::numbers::pi * tanh_a;
        }
      }
}

// y (batch, seq, heads, R, N) from x (batch, seq, R, N), bias (heads, R, N), cossin.
inline Values qk(const Dims& d, const Values& x, const Values& bias, const Values& cossin) {
  Values y(static_cast<std::size_t>(d.batch * d.seq * d.heads * d.R * d.N));
  for (index_t bt = 0; bt < d.batch * d.seq; ++bt)
    for (index_t h = 0; h < d.heads; ++h)
      for (index_t r = 0; r < d.R; ++r) {
        const double* xr = x.data() + (bt * d.R + r) * d.N;
        const double* br = bias.data() + (h * d.R + r) * d.N;
        double* yr = y.data() + ((bt * d.heads + h) * d.R + r) * d.N;
        for (index_t n = 0; n < d.N; ++n) yr[n] = xr[n] + br[n];
        for (index_t i = 0; i < d.S; ++i) {
          const double c = cossin[2 * ((bt * d.heads + h) * d.S + i)], s = cossin[2 * ((bt * d.heads + h) * d.S + i) + 1];
          const double u0 = yr[2 * i], u1 = yr[2 * i + 1];
          yr[2 * i] = u0 * c - u1 * s;
          yr[2 * i + 1] = u0 * s + u1 * c;
        }
      }
  return y;
}

// Adds dx, dbias, dcossin given dy: du = R(theta)^T dy on rotated pairs, du = dy elsewhere.
inline void qk_backward(const Dims& d, const Values& x, const Values& bias, const Values& cossin, const Values& dy,
                        Values& dx, Values& dbias, Values& dcossin) {
  for (index_t bt = 0; bt < d.batch * d.seq; ++bt)
    for (index_t h = 0; h < d.heads; ++h)
      for (index_t r = 0; r < d.R; ++r) {
        const index_t xo = (bt * d.R + r) * d.N, bo = (h * d.R + r) * d.N, yo = ((bt * d.heads + h) * d.R + r) * d.N;
        for (index_t n = 0; n < d.N; ++n) {
          const index_t i = n / 2;
          double du = dy[yo + n];
          if (i < d.S) {
            const index_t at = (bt * d.heads + h) * d.S + i;
            const double c = cossin[2 * at], s = cossin[2 * at + 1];
            const double dy0 = dy[yo + 2 * i], dy1 = dy[yo + 2 * i + 1];
            du = n % 2 == 0 ? dy0 * c + dy1 * s : -dy0 * s + dy1 * c;
            if (n % 2 == 0) {
              const double u0 = x[xo + 2 * i] + bias[bo + 2 * i], u1 = x[xo + 2 * i + 1] + bias[bo + 2 * i + 1];
              dcossin[2 * at] += dy0 * u0 + dy1 * u1;
              dcossin[2 * at + 1] += -dy0 * u1 + dy1 * u0;
            }
          }
          dx[xo + n] += du;
          dbias[bo + n] += du;
        }
      }
}

}  // namespace rotary_reference

template <>
struct KernelCases<kernels::SsmRotary> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double";

  // The reference runs in double from the same inputs. In float the kernel's angle sums over up to
  // 12 tokens (theta reaches ~30 rad before the wrap) carry float rounding into cos and sin:
  // worst measured over these cases (GCC 12, AVX-512) 9.9e-7; in double 2.4e-15. The rows of 100
  // tokens (documents of up to 62): |diff| / (|want| + max |want|) at most 1.8e-6.
  static constexpr Tolerance kTolerance{1e-5, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"angles: theta restarts at every document; row starting mid-document, 1-token documents, 3 heads",
         [](H& h) { return angles_problem(h, packed_layout<B>({{-2, 1, 5, 1, 3}, {12}}, kBos), 3, 2); },
         kTolerance, true},
        {"qk: rank 2, N 6 with 2 of 3 pairs rotated, bias per head (cossin as an input)",
         [](H& h) { return qk_problem(h, {2, 5, 2, 2, 2, 6}); },
         kTolerance, true},
        {"angles then qk (the Mamba-3 layer's path): rank 1, N 4, both pairs rotated, 2 heads",
         [](H& h) { return layer_problem(h, packed_layout<B>({{4, 1, 3}, {-3, 5}}, kBos), {2, 8, 2, 2, 1, 4}); },
         kTolerance, true},
        // Rows of 100 tokens: on CUDA theta and its gradient are scans over 4 runs of 32 tokens
        // (detail/token_runs.cuh), with documents starting inside runs and running across them;
        // dbias sums 200 tokens in 7 runs. Too long for finite differences.
        {"angles then qk over rows of 100 tokens: documents across runs of tokens, a row starting mid-document",
         [](H& h) { return layer_problem(h, packed_layout<B>({{37, 1, 62}, {-45, 55}}, kBos), {2, 100, 2, 2, 1, 4}); },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;
  using Values = rotary_reference::Values;
  using Dims = rotary_reference::Dims;

  template <class T, Backend B>
  static Values host(const Var<T, B>& x) {
    return Harness<T, B>::doubles(x.value());
  }

  // inputs: angle (batch, seq, S) in [-2, 2), dt (batch, seq, heads) in [0.1, 2).
  template <class T, Backend B>
  static KernelProblem<T, B> angles_problem(Harness<T, B>& h, DocumentLayout<B> docs, index_t heads, index_t S) {
    using V = Var<T, B>;
    const Dims d{docs.batch, docs.seq, heads, S, 0, 0};
    std::vector<V> inputs{h.param({d.batch, d.seq, S}, -2.0, 2.0), h.param({d.batch, d.seq, heads}, 0.1, 2.0)};
    auto fused = [docs](const std::vector<V>& in) { return rotary_angles(in[0], in[1], docs); };
    auto reference = [d, docs](const std::vector<V>& in, Harness<T, B>& hr) {
      const Values angle = host(in[0]), dt = host(in[1]);
      const Values cossin = rotary_reference::angles(d, docs, angle, dt);
      const Values dcossin = Harness<T, B>::doubles(hr.uniform({d.batch, d.seq, d.heads, d.S, 2}));
      Values dangle(angle.size()), ddt(dt.size());
      rotary_reference::angles_backward(d, docs, angle, dt, cossin, dcossin, dangle, ddt);
      return Outputs{cossin, dangle, ddt};
    };
    return {std::move(inputs), fused, reference};
  }

  // inputs: x (batch, seq, R, N), bias (heads, R, N), cossin (batch, seq, heads, S, 2) of angles
  // drawn in [-pi, pi) (on the unit circle, as rotary_angles makes them).
  template <class T, Backend B>
  static KernelProblem<T, B> qk_problem(Harness<T, B>& h, const Dims& d) {
    using V = Var<T, B>;
    V x = h.param({d.batch, d.seq, d.R, d.N}), bias = h.param({d.heads, d.R, d.N});
    std::vector<T> cossin;
    for (const T theta : h.uniform({d.batch, d.seq, d.heads, d.S}, -std::numbers::pi, std::numbers::pi).to_host()) {
      cossin.push_back(std::cos(theta));
      cossin.push_back(std::sin(theta));
    }
    std::vector<V> inputs{x, bias, V::parameter(Tensor<T, B>::from_host(Shape{d.batch, d.seq, d.heads, d.S, 2}, cossin))};
    auto fused = [](const std::vector<V>& in) { return rotary_qk(in[0], in[1], in[2]); };
    auto reference = [d](const std::vector<V>& in, Harness<T, B>& hr) {
      const Values xv = host(in[0]), bv = host(in[1]), cs = host(in[2]);
      const Values dy = Harness<T, B>::doubles(hr.uniform({d.batch, d.seq, d.heads, d.R, d.N}));
      Values dx(xv.size()), dbias(bv.size()), dcossin(cs.size());
      rotary_reference::qk_backward(d, xv, bv, cs, dy, dx, dbias, dcossin);
      return Outputs{rotary_reference::qk(d, xv, bv, cs), dx, dbias, dcossin};
    };
    return {std::move(inputs), fused, reference};
  }

  // inputs: x (batch, seq, R, N), bias (heads, R, N), angle (batch, seq, S), dt (batch, seq, heads).
  template <class T, Backend B>
  static KernelProblem<T, B> layer_problem(Harness<T, B>& h, DocumentLayout<B> docs, const Dims& d) {
    using V = Var<T, B>;
    std::vector<V> inputs{h.param({d.batch, d.seq, d.R, d.N}), h.param({d.heads, d.R, d.N}),
                          h.param({d.batch, d.seq, d.S}, -2.0, 2.0), h.param({d.batch, d.seq, d.heads}, 0.1, 2.0)};
    auto fused = [docs](const std::vector<V>& in) { return rotary_qk(in[0], in[1], rotary_angles(in[2], in[3], docs)); };
    auto reference = [d, docs](const std::vector<V>& in, Harness<T, B>& hr) {
      const Values xv = host(in[0]), bv = host(in[1]), angle = host(in[2]), dt = host(in[3]);
      const Values cossin = rotary_reference::angles(d, docs, angle, dt);
      const Values dy = Harness<T, B>::doubles(hr.uniform({d.batch, d.seq, d.heads, d.R, d.N}));
      Values dx(xv.size()), dbias(bv.size()), dcossin(cossin.size()), dangle(angle.size()), ddt(dt.size());
      rotary_reference::qk_backward(d, xv, bv, cossin, dy, dx, dbias, dcossin);
      rotary_reference::angles_backward(d, docs, angle, dt, cossin, dcossin, dangle, ddt);
      return Outputs{rotary_reference::qk(d, xv, bv, cossin), dx, dbias, dangle, ddt};
    };
    return {std::move(inputs), fused, reference};
  }
};

}  // namespace megacpp::testing
