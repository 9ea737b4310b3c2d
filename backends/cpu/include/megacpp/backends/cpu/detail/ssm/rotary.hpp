// CPU kernels of the SsmRotary contract (megacpp/core/kernels/ssm_rotary.hpp, which holds the
// equations and the angle and rotation formulas these share with decoding): Mamba-3's
// data-dependent rotary angles and the rotation of B and C. Every output element is computed by
// one thread in a fixed order: bitwise reproducible, independent of the thread count.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp::cpu::ssm {

// angle (batch, seq, S) raw projections, dt (batch, seq, heads) ->
// cossin (batch, seq, heads, S, 2) = (cos theta, sin theta), theta as the contract defines it.
template <class T>
void rotary_angles_forward(index_t batch, index_t seq, index_t heads, index_t n_angles, const std::int32_t* doc_ids,
                           const T* angle, const T* dt, T* cossin) {
  std::vector<T> tanh_a(static_cast<std::size_t>(batch * seq * n_angles));  // (batch, seq, S)
  parallel_for(batch * seq, n_angles * 20, [&](index_t bt) {
    for (index_t s = 0; s < n_angles; ++s) tanh_a[bt * n_angles + s] = std::tanh(angle[bt * n_angles + s]);
  });
  parallel_for(batch * heads, seq * n_angles * 40, [&](index_t bh) {
    const index_t b = bh / heads, h = bh % heads;
    std::vector<T> theta(static_cast<std::size_t>(n_angles), T(0));
    for (index_t t = 0; t < seq; ++t) {
      if (kernels::starts_document(doc_ids + b * seq, t)) std::fill(theta.begin(), theta.end(), T(0));
      const index_t bt = b * seq + t;
      const T d = dt[bt * heads + h];
      T* out = cossin + (bt * heads + h) * n_angles * 2;
      for (index_t s = 0; s < n_angles; ++s) {
        theta[s] = kernels::advance_angle(theta[s], tanh_a[bt * n_angles + s], d);
        out[2 * s] = std::cos(theta[s]);
        out[2 * s + 1] = std::sin(theta[s]);
      }
    }
  });
}

// Backward of rotary_angles_forward. With dtheta = -sin dcos + cos dsin and
// G_t = sum_{u >= t, same document} dtheta_u (the reverse cumulative sum):
//   dangle[b,t,s] += pi (1 - tanh^2(angle)) sum_h dt[b,t,h] G[b,t,h,s]
//   ddt[b,t,h]    += pi sum_s tanh(angle[b,t,s]) G[b,t,h,s]
// dangle and ddt may each be null. Pass 1 owns (b, h); pass 2 owns tokens.
template <class T>
void rotary_angles_backward(index_t batch, index_t seq, index_t heads, index_t n_angles, const std::int32_t* doc_ids,
                            const T* angle, const T* dt, const T* cossin, const T* dcossin, T* dangle, T* ddt) {
  const index_t row = heads * n_angles;
  std::vector<T> tanh_a(static_cast<std::size_t>(batch * seq * n_angles));  // (batch, seq, S)
  std::vector<T> G(static_cast<std::size_t>(batch * seq * row));            // (batch, seq, heads, S)
  parallel_for(batch * seq, n_angles * 20, [&](index_t bt) {
    for (index_t s = 0; s < n_angles; ++s) tanh_a[bt * n_angles + s] = std::tanh(angle[bt * n_angles + s]);
  });
  const T pi = static_cast<T>(kernels::kPi);
  parallel_for(batch * heads, seq * n_angles * 8, [&](index_t bh) {
    const index_t b = bh / heads, h = bh % heads;
    std::vector<T> acc(static_cast<std::size_t>(n_angles), T(0));
    for (index_t t = seq - 1; t >= 0; --t) {
      const index_t bt = b * seq + t;
      const index_t at = (bt * heads + h) * n_angles;
      T gdt = 0;
      for (index_t s = 0; s < n_angles; ++s) {
        const T c = cossin[2 * (at + s)], sn = cossin[2 * (at + s) + 1];
        acc[s] += -sn * dcossin[2 * (at + s)] + c * dcossin[2 * (at + s) + 1];
        G[at + s] = acc[s];
        gdt += pi * tanh_a[bt * n_angles + s] * acc[s];
      }
      if (ddt) ddt[bt * heads + h] += gdt;
      if (kernels::starts_document(doc_ids + b * seq, t)) std::fill(acc.begin(), acc.end(), T(0));
    }
  });
  if (!dangle) return;
  parallel_for(batch * seq, row * 2, [&](index_t bt) {
    for (index_t s = 0; s < n_angles; ++s) {
      T sum = 0;
      for (index_t h = 0; h < heads; ++h) sum += dt[bt * heads + h] * G[(bt * heads + h) * n_angles + s];
      const T th = tanh_a[bt * n_angles + s];
      dangle[bt * n_angles + s] += pi * (T(1) - th * th) * sum;
    }
  });
}

// x (batch, seq, R, N) shared by all heads, bias (heads, R, N), cossin (batch, seq, heads, S, 2)
// -> y (batch, seq, heads, R, N): u = x + bias_h, pairs (2i, 2i+1) of u rotated by theta_i for
// i < S, the other entries copied.
template <class T>
void rotary_qk_forward(index_t batch, index_t seq, index_t heads, index_t rank, index_t d_state, index_t n_angles,
                       const T* x, const T* bias, const T* cossin, T* y) {
  parallel_for(batch * seq, heads * rank * d_state * 3, [&](index_t bt) {
    for (index_t h = 0; h < heads; ++h) {
      const T* cs = cossin + (bt * heads + h) * n_angles * 2;
      for (index_t r = 0; r < rank; ++r) {
        const T* xr = x + (bt * rank + r) * d_state;
        const T* br = bias + (h * rank + r) * d_state;
        T* yr = y + ((bt * heads + h) * rank + r) * d_state;
        for (index_t n = 0; n < d_state; ++n) yr[n] = xr[n] + br[n];
        for (index_t i = 0; i < n_angles; ++i) {
          kernels::rotate_pair(yr[2 * i], yr[2 * i + 1], cs[2 * i], cs[2 * i + 1], yr[2 * i], yr[2 * i + 1]);
        }
      }
    }
  });
}

// Backward of rotary_qk_forward (each output pointer may be null):
//   du = R(-theta) dy;  dx[b,t,r] += sum_h du[b,t,h,r];  dbias[h,r] += sum_{b,t} du[b,t,h,r]
//   dcos += dy0 u0 + dy1 u1,  dsin += -dy0 u1 + dy1 u0   (summed over ranks)
// Pass 1 owns tokens (dx, dcossin); pass 2 owns (h, r) rows of dbias and walks tokens in order.
template <class T>
void rotary_qk_backward(index_t batch, index_t seq, index_t heads, index_t rank, index_t d_state, index_t n_angles,
                        const T* x, const T* bias, const T* cossin, const T* dy, T* dx, T* dbias, T* dcossin) {
  const index_t rot = 2 * n_angles;  // rotated entries at the front of each row
  if (dx || dcossin) {
    parallel_for(batch * seq, heads * rank * d_state * 6, [&](index_t bt) {
      for (index_t h = 0; h < heads; ++h) {
        const T* cs = cossin + (bt * heads + h) * n_angles * 2;
        T* dcs = dcossin ? dcossin + (bt * heads + h) * n_angles * 2 : nullptr;
        for (index_t r = 0; r < rank; ++r) {
          const T* xr = x + (bt * rank + r) * d_state;
          const T* br = bias + (h * rank + r) * d_state;
          const T* g = dy + ((bt * heads + h) * rank + r) * d_state;
          T* dxr = dx ? dx + (bt * rank + r) * d_state : nullptr;
          for (index_t i = 0; i < n_angles; ++i) {
            const T c = cs[2 * i], s = cs[2 * i + 1];
            const T g0 = g[2 * i], g1 = g[2 * i + 1];
            if (dxr) {
              dxr[2 * i] += g0 * c + g1 * s;
              dxr[2 * i + 1] += -g0 * s + g1 * c;
            }
            if (dcs) {
              const T u0 = xr[2 * i] + br[2 * i], u1 = xr[2 * i + 1] + br[2 * i + 1];
              dcs[2 * i] += g0 * u0 + g1 * u1;
              dcs[2 * i + 1] += -g0 * u1 + g1 * u0;
            }
          }
          if (dxr)
            for (index_t n = rot; n < d_state; ++n) dxr[n] += g[n];
        }
      }
    });
  }
  if (!dbias) return;
  parallel_for(heads * rank, batch * seq * d_state * 4, [&](index_t hr) {
    const index_t h = hr / rank, r = hr % rank;
    T* db = dbias + hr * d_state;
    for (index_t bt = 0; bt < batch * seq; ++bt) {
      const T* cs = cossin + (bt * heads + h) * n_angles * 2;
      const T* g = dy + ((bt * heads + h) * rank + r) * d_state;
      for (index_t i = 0; i < n_angles; ++i) {
        const T c = cs[2 * i], s = cs[2 * i + 1];
        db[2 * i] += g[2 * i] * c + g[2 * i + 1] * s;
        db[2 * i + 1] += -g[2 * i] * s + g[2 * i + 1] * c;
      }
      for (index_t n = rot; n < d_state; ++n) db[n] += g[n];
    }
  });
}

}  // namespace megacpp::cpu::ssm
