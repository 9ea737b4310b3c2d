// tests/cuda_emulation/attention_checks.hpp: the comparisons of an emulated attention run with the
// double reference of tests/cuda/attention_bf16_cases.hpp, as tests/cuda/attention_bf16_checks.hpp
// makes them on the GPU (that file needs the CUDA backend, so the few lines are restated here).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention_emulated.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::cuda_emulation {

using attention_bf16_test::Inputs;
using attention_bf16_test::Problem;

/// Initial dq, dk, dv to add into: the draws of attention_bf16_checks.hpp's random_grads(p, seed).
inline AttentionRun random_initial(const Problem& p, std::uint64_t seed) {
  Rng rng(seed);
  auto draw = [&](index_t heads) {
    std::vector<float> x(static_cast<std::size_t>(p.batch * p.seq * heads * p.dim));
    for (float& e : x) e = static_cast<float>(rng.normal());
    return x;
  };
  AttentionRun r;
  r.dq = draw(p.heads);
  r.dk = draw(p.kv_heads);
  r.dv = draw(p.kv_heads);
  return r;
}

inline std::vector<double> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<double> d(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) d[i] = static_cast<double>(after[i]) - before[i];
  return d;
}

/// Each output's error relative to its largest element (attention_bf16_cases.hpp's normwise_error).
struct Errors {
  double o, lse, dq, dk, dv;
};

/// Against the reference on `in` with exact P and dS (in: raw inputs rounded to bf16 for the bf16
/// kernels, the raw ones for the fp32 kernels).
inline Errors errors(const Problem& p, const Inputs& in, const AttentionRun& got, const AttentionRun& initial) {
  using namespace attention_bf16_test;
  const Forward f = reference_forward(p, in, false);
  const Gradients g = reference_backward(p, in, got.o, got.lse, false);
  return {normwise_error(got.o, f.o), normwise_error(got.lse, f.lse), normwise_error(added(got.dq, initial.dq), g.dq),
          normwise_error(added(got.dk, initial.dk), g.dk), normwise_error(added(got.dv, initial.dv), g.dv)};
}

/// "" if padding tokens got o = 0, lse = -inf and no gradient (bitwise), else what is wrong.
inline std::string check_padding(const Problem& p, const AttentionRun& r, const AttentionRun& initial) {
  const std::vector<bool> pad = attention_bf16_test::padding_tokens(p);
  const std::size_t d = static_cast<std::size_t>(p.dim), heads = static_cast<std::size_t>(p.heads),
                    kv_heads = static_cast<std::size_t>(p.kv_heads);
  for (std::size_t t = 0; t < pad.size(); ++t) {
    if (!pad[t]) continue;
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t row = t * heads + h;
      if (r.lse[row] != -std::numeric_limits<float>::infinity()) return "padding token " + std::to_string(t) + ": lse";
      for (std::size_t e = 0; e < d; ++e)
        if (r.o[row * d + e] != 0.0f || std::memcmp(&r.dq[row * d + e], &initial.dq[row * d + e], 4) != 0)
          return "padding token " + std::to_string(t) + ": o or dq";
    }
    for (std::size_t e = t * kv_heads * d; e < (t + 1) * kv_heads * d; ++e)
      if (std::memcmp(&r.dk[e], &initial.dk[e], 4) != 0 || std::memcmp(&r.dv[e], &initial.dv[e], 4) != 0)
        return "padding token " + std::to_string(t) + ": dk or dv";
  }
  return "";
}

inline bool bitwise_equal(const AttentionRun& a, const AttentionRun& b) {
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  return same(a.o, b.o) && same(a.lse, b.lse) && same(a.dq, b.dq) && same(a.dk, b.dk) && same(a.dv, b.dv);
}

}  // namespace megacpp::cuda_emulation
