// Kernel cases of the SsmStep contract (megacpp/core/kernels/ssm_step.hpp): packed rows of
// documents decoded token by token through kernels::SsmStep<B>::step, each row's caches zeroed at
// its document starts, against a literal host loop in double over the whole sequence (the
// recurrence of the contract's comment, written out again: the angle walk, the rotation, the
// trapezoid's two terms, the readout). Forward only (decoding has no backward), so no gradcheck.
// Part of tests/support/kernel_cases.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/decode_steps.hpp"
#include "support/kernel_case.hpp"
#include "support/packed_documents.hpp"

#include "megacpp/core/kernels/ssm_step.hpp"

namespace megacpp::testing {

template <>
struct KernelCases<kernels::SsmStep> {
  static constexpr bool specialised = true;
  static constexpr const char* reference = "a host loop in double over the whole sequence";

  // The step runs in T, the loop in double: a few float ulps of y's scale, growing with the
  // document length. Worst measured over these cases (GCC 12, AVX-512): 1e-7 to 3e-7 in float,
  // 1e-16 to 1e-15 in double; the bounds leave ~10x and ~100x of room.
  static constexpr Tolerance kTolerance{3e-6, 1e-13};

  template <class T, Backend B>
  static std::vector<KernelCase<T, B>> cases() {
    using H = Harness<T, B>;
    return {
        {"SISO, 2 heads, 2 angles of d_state 6; a row starting mid-document, 1-token documents",
         [](H& h) { return problem(h, packed_layout<B>({{-3, 5, 1, 1, 4}, {1, 7, 6}}, kBos), 2, 1, 6, 3, 2); },
         kTolerance, false},
        {"MIMO rank 3, d_state 8 with 4 angles (every pair rotated), head_dim 5",
         [](H& h) { return problem(h, packed_layout<B>({{4, 8}, {-5, 7}}, kBos), 3, 3, 8, 5, 4); }, kTolerance, false},
        // More columns than a CUDA block has threads (130 > 128), grid-stride over 2 x 3 pairs.
        {"head_dim 130, 3 heads, MIMO rank 2", [](H& h) { return problem(h, packed_layout<B>({{3, 2}, {5}}, kBos), 3, 2, 4, 130, 1); },
         kTolerance, false},
        // Mamba-2's step: B and C per group of heads, no angles.
        {"6 heads in 3 groups of B and C, SISO, no angles", [](H& h) { return problem(h, packed_layout<B>({{2, 5}, {-4, 3}}, kBos), 6, 1, 4, 3, 0, 3); },
         kTolerance, false},
        {"4 heads in 2 groups, MIMO rank 2 with 1 angle", [](H& h) { return problem(h, packed_layout<B>({{6}, {1, 5}}, kBos), 4, 2, 4, 3, 1, 2); },
         kTolerance, false},
    };
  }

 private:
  static constexpr std::int32_t kBos = 0;

  // The operands, in the order of `inputs`: b, c (batch, seq, G, R, N); b_bias, c_bias (heads, R, N);
  // angle (batch, seq, S); dt (batch, seq, heads); v (batch, seq, heads, R, P); log_alpha, gamma,
  // shift (batch, seq, heads); D (heads). Drawn uniform in [-1, 1); the ops use dt = (x + 1) / 2 and
  // log_alpha = -(x + 1) / 2, the signs the layer's are (a step that shrinks the state).
  enum Operand { kB, kC, kBBias, kCBias, kAngle, kDt, kV, kLogAlpha, kGamma, kShift, kD };

  struct Sizes {
    index_t batch, seq, heads, rank, d_state, head_dim, angles, groups;
  };

  template <class T, Backend B>
  static KernelProblem<T, B> problem(Harness<T, B>& h, DocumentLayout<B> docs, index_t heads, index_t rank,
                                     index_t d_state, index_t head_dim, index_t angles, index_t groups = 1) {
    using V = Var<T, B>;
    const Sizes z{docs.batch, docs.seq, heads, rank, d_state, head_dim, angles, groups};
    const index_t bs = z.batch, t = z.seq;
    std::vector<V> inputs{h.param({bs, t, groups, rank, d_state}), h.param({bs, t, groups, rank, d_state}),
                          h.param({heads, rank, d_state}),    h.param({heads, rank, d_state}),
                          h.param({bs, t, angles}),           h.param({bs, t, heads}),
                          h.param({bs, t, heads, rank, head_dim}), h.param({bs, t, heads}),
                          h.param({bs, t, heads}),            h.param({bs, t, heads}),
                          h.param({heads})};
    auto decoded = [docs, z](const std::vector<V>& in) { return decode_all<T, B>(docs, z, in); };
    auto literal = [docs, z](const std::vector<V>& in, Harness<T, B>&) {
      NoGrad no_grad;
      return Outputs{literal_recurrence(docs, z, in)};
    };
    return {std::move(inputs), decoded, literal};
  }

  template <class T, Backend B>
  static std::vector<std::vector<double>> host_operands(const std::vector<Var<T, B>>& in) {
    std::vector<std::vector<double>> x;
    for (const Var<T, B>& v : in) x.push_back(Harness<T, B>::doubles(v.value()));
    for (double& e : x[kDt]) e = (e + 1) / 2;
    for (double& e : x[kLogAlpha]) e = -(e + 1) / 2;
    return x;
  }

  // Decodes every row token by token: y (batch, seq, heads, R, P).
  template <class T, Backend B>
  static Var<T, B> decode_all(const DocumentLayout<B>& docs, const Sizes& z, const std::vector<Var<T, B>>& in) {
    const std::vector<std::vector<double>> x = host_operands<T, B>(in);
    const index_t Hh = z.heads, R = z.rank, N = z.d_state, P = z.head_dim, S = z.angles, G = z.groups;
    kernels::SsmStepParams p{z.batch, Hh, R, N, P, S, G};
    p.validate("decode_all");
    Tensor<T, B> state = Tensor<T, B>::zeros({z.batch, Hh, N, P}), theta = Tensor<T, B>::zeros({z.batch, Hh, S}),
                 k_prev = Tensor<T, B>::zeros({z.batch, Hh, R, N}), v_prev = Tensor<T, B>::zeros({z.batch, Hh, R, P});
    const Tensor<T, B> b_bias = on_backend<T, B>(x[kBBias], {Hh, R, N}), c_bias = on_backend<T, B>(x[kCBias], {Hh, R, N}),
                       D = on_backend<T, B>(x[kD], {Hh});
    const auto token = [&](Operand o, index_t t, index_t width) { return token_slice(x[o], z.batch, z.seq, t, width); };
    std::vector<T> y(static_cast<std::size_t>(z.batch * z.seq * Hh * R * P));
    for (index_t t = 0; t < z.seq; ++t) {
      for (index_t b = 0; b < z.batch; ++b)
        if (starts_document_at(docs.spans[static_cast<std::size_t>(b)], t))
          for (Tensor<T, B>* cache : {&state, &theta, &k_prev, &v_prev}) {
            Tensor<T, B> row = cache->rows(b, b + 1);
            if (row.numel()) row.fill(T(0));
          }
      const Tensor<T, B> bt = on_backend<T, B>(token(kB, t, G * R * N), {z.batch, G, R, N}),
                         ct = on_backend<T, B>(token(kC, t, G * R * N), {z.batch, G, R, N}),
                         angle = on_backend<T, B>(token(kAngle, t, S), {z.batch, S}),
                         dt = on_backend<T, B>(token(kDt, t, Hh), {z.batch, Hh}),
                         v = on_backend<T, B>(token(kV, t, Hh * R * P), {z.batch, Hh, R, P}),
                         la = on_backend<T, B>(token(kLogAlpha, t, Hh), {z.batch, Hh}),
                         gamma = on_backend<T, B>(token(kGamma, t, Hh), {z.batch, Hh}),
                         shift = on_backend<T, B>(token(kShift, t, Hh), {z.batch, Hh});
      Tensor<T, B> yt({z.batch, Hh, R, P});
      const kernels::SsmStepArgs<T> a{bt.data(),    ct.data(),     b_bias.data(), c_bias.data(), angle.data(),
                                      dt.data(),    v.data(),      la.data(),     gamma.data(),  shift.data(),
                                      D.data(),     state.data(),  theta.data(),  k_prev.data(), v_prev.data(),
                                      yt.data()};
      kernels::SsmStep<B>::step(p, a);
      const std::vector<T> yh = yt.to_host();
      for (index_t b = 0; b < z.batch; ++b)
        std::copy_n(yh.begin() + b * Hh * R * P, Hh * R * P, y.begin() + (b * z.seq + t) * Hh * R * P);
    }
    return Var<T, B>(Tensor<T, B>::from_host({z.batch, z.seq, Hh, R, P}, y));
  }

  // The recurrence over the whole sequence, per (row, head), in double.
  template <class T, Backend B>
  static std::vector<double> literal_recurrence(const DocumentLayout<B>& docs, const Sizes& z,
                                                const std::vector<Var<T, B>>& in) {
    const std::vector<std::vector<double>> x = host_operands<T, B>(in);
    const index_t Hh = z.heads, R = z.rank, N = z.d_state, P = z.head_dim, S = z.angles, G = z.groups;
    constexpr double kPi = 3.14159265358979323846;
    std::vector<double> y(static_cast<std::size_t>(z.batch * z.seq * Hh * R * P));
    for (index_t b = 0; b < z.batch; ++b)
      for (index_t h = 0; h < Hh; ++h) {
        std::vector<double> theta(static_cast<std::size_t>(S)), state(static_cast<std::size_t>(N * P)),
            k_prev(static_cast<std::size_t>(R * N)), v_prev(static_cast<std::size_t>(R * P));
        for (index_t t = 0; t < z.seq; ++t) {
          if (starts_document_at(docs.spans[static_cast<std::size_t>(b)], t)) {
            for (auto* c : {&theta, &state, &k_prev, &v_prev}) std::fill(c->begin(), c->end(), 0.0);
          }
          const index_t bt = b * z.seq + t, bth = bt * Hh + h, btg = bt * G + h / (Hh / G);
          for (index_t s = 0; s < S; ++s) {
            double& th = theta[static_cast<std::size_t>(s)];
            th += kPi * std::tanh(x[kAngle][static_cast<std::size_t>(bt * S + s)]) * x[kDt][static_cast<std::size_t>(bth)];
            th -= 2 * kPi * std::floor(th / (2 * kPi));
          }
          // k_r = rot(B_r + bias), q_r = rot(C_r + bias): pair s of (2s, 2s + 1) by theta_s
          std::vector<double> k(static_cast<std::size_t>(R * N)), q(k.size());
          for (index_t r = 0; r < R; ++r)
            for (index_t n = 0; n < N; ++n) {
              const auto i = static_cast<std::size_t>(r * N + n);
              k[i] = x[kB][static_cast<std::size_t>((btg * R + r) * N + n)] + x[kBBias][static_cast<std::size_t>((h * R + r) * N + n)];
              q[i] = x[kC][static_cast<std::size_t>((btg * R + r) * N + n)] + x[kCBias][static_cast<std::size_t>((h * R + r) * N + n)];
            }
          for (index_t r = 0; r < R; ++r)
            for (index_t s = 0; s < S; ++s)
              for (auto* u : {&k, &q}) {
                const auto i0 = static_cast<std::size_t>(r * N + 2 * s), i1 = i0 + 1;
                const double c = std::cos(theta[static_cast<std::size_t>(s)]), sn = std::sin(theta[static_cast<std::size_t>(s)]);
                const double u0 = (*u)[i0], u1 = (*u)[i1];
                (*u)[i0] = u0 * c - u1 * sn;
                (*u)[i1] = u0 * sn + u1 * c;
              }
          const double alpha = std::exp(x[kLogAlpha][static_cast<std::size_t>(bth)]);
          const double beta = x[kShift][static_cast<std::size_t>(bth)] * alpha, gamma = x[kGamma][static_cast<std::size_t>(bth)];
          const double* v = x[kV].data() + bth * R * P;
          for (index_t n = 0; n < N; ++n)
            for (index_t c = 0; c < P; ++c) {
              double s = alpha * state[static_cast<std::size_t>(n * P + c)];
              for (index_t r = 0; r < R; ++r)
                s += beta * k_prev[static_cast<std::size_t>(r * N + n)] * v_prev[static_cast<std::size_t>(r * P + c)] +
                     gamma * k[static_cast<std::size_t>(r * N + n)] * v[r * P + c];
              state[static_cast<std::size_t>(n * P + c)] = s;
            }
          for (index_t r = 0; r < R; ++r)
            for (index_t c = 0; c < P; ++c) {
              double acc = x[kD][static_cast<std::size_t>(h)] * v[r * P + c];
              for (index_t n = 0; n < N; ++n) acc += q[static_cast<std::size_t>(r * N + n)] * state[static_cast<std::size_t>(n * P + c)];
              y[static_cast<std::size_t>(bth * R * P + r * P + c)] = acc;
            }
          k_prev = k;
          std::copy(v, v + R * P, v_prev.begin());
        }
      }
    return y;
  }
};

}  // namespace megacpp::testing
