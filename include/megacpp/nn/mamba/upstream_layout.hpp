// megacpp/nn/mamba/upstream_layout.hpp: loads the weights of a reference Mamba3 module
// (state-spaces/mamba mamba_ssm/modules/mamba3.py) into Mamba3<T, B, Policy, AAct>.
//
// Names and layouts of the reference's parameters (one module; `prefix` selects it in a whole
// model's file, e.g. "backbone.layers.3.mixer."):
//
//   in_proj.weight (d_in_proj, d_model)  rows [z, x, B, C, dd_dt, dd_A, trap, angle], B and C as (R, N)
//   dt_bias (H)   D (H)   B_bias, C_bias (H, R, N)   B_norm.weight, C_norm.weight (N)
//   mimo_x, mimo_z, mimo_o (H, R, P)  (is_mimo)       norm.weight (d_inner)  (is_outproj_norm)
//   out_proj.weight (d_model, d_inner)
//
// All of these are megacpp's layouts too, but for one thing: which state channels a rotary angle
// turns. megacpp (and the reference's SISO kernels) rotate the adjacent pairs (2i, 2i+1), i < S;
// the reference's MIMO kernels (tilelang mamba3_mimo_fwd.py, and `rotate_pairwise = not is_mimo`
// in Mamba3.step) rotate (i, i + N/2), i < S, and pass the other channels through. The state
// channels enter the layer only through B and C (in_proj rows, RMSNorm gains, biases) and leave it
// only through the inner product q . k, so renumbering the N channels of all of them alike gives
// the same outputs; for MIMO the loader renumbers them with upstream_mimo_state_order.
//
// What a file cannot say: which A activation the checkpoint was trained with (the reference's
// heavy tail since commit c69aaab, softplus before) and ngroups (megacpp has ngroups = 1, the
// reference's default; another value shows as an in_proj shape mismatch). Choose the layer type
// accordingly.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/nn/mamba/mamba3.hpp"

namespace megacpp {

/// For N state channels of which S pairs rotate: entry n is the reference MIMO channel that
/// megacpp's channel n holds. megacpp's pair (2i, 2i+1) is the reference's (i, i + N/2) for i < S;
/// the channels no angle turns follow in the reference's order ([S, N/2), then [N/2 + S, N)).
inline std::vector<index_t> upstream_mimo_state_order(index_t N, index_t S) {
  check(N % 2 == 0 && S >= 0 && 2 * S <= N, "upstream_mimo_state_order", "the reference's MIMO pairing needs an even d_state",
        " and at most d_state / 2 angles, got d_state ", N, " and ", S, " angles");
  std::vector<index_t> order;
  order.reserve(static_cast<std::size_t>(N));
  for (index_t i = 0; i < S; ++i) {
    order.push_back(i);
    order.push_back(i + N / 2);
  }
  for (index_t n = S; n < N / 2; ++n) order.push_back(n);
  for (index_t n = N / 2 + S; n < N; ++n) order.push_back(n);
  return order;
}

/// Loads the reference module's tensors `prefix + name` from `file` into `layer`, renumbering the
/// state channels of a MIMO layer (file comment). `file` is an io::SafetensorsReader or anything
/// with `contains(name)` and `read<T, B>(name, const Shape* expected)`. A source with `read_as`
/// (SafetensorsReader) converts other floating dtypes by value, so the reference's bf16 releases
/// load into fp32 layers. Throws megacpp::Error naming
/// the tensor for a missing tensor, a non-floating dtype or a shape mismatch, or a tensor that says the layer was
/// built differently (mimo_* for a SISO layer, norm.weight without is_outproj_norm); nothing changes
/// before every tensor has been read.
template <class T, Backend B, class Policy, class AAct, class Source>
void load_upstream_mamba3(Mamba3<T, B, Policy, AAct>& layer, const Source& file, const std::string& prefix = "") {
  constexpr index_t R = Policy::rank;
  const Mamba3Config& c = layer.config;
  const index_t di = c.d_inner(), N = c.d_state, S = layer.n_angles();
  std::vector<index_t> order(static_cast<std::size_t>(N));
  for (index_t n = 0; n < N; ++n) order[static_cast<std::size_t>(n)] = n;
  if constexpr (R > 1) order = upstream_mimo_state_order(N, S);

  const auto refuse_extra = [&](const char* name, bool layer_has_it, const char* why) {
    check(layer_has_it || !file.contains(prefix + name), "load_upstream_mamba3", "the file holds \"", prefix + name,
          "\" but this layer ", why);
  };
  refuse_extra("mimo_x", R > 1, "is SISO: load it into Mamba3<T, B, MIMO<R>> with the file's rank");
  refuse_extra("norm.weight", c.is_outproj_norm, "has no out_proj norm: build it with Mamba3Config::is_outproj_norm = true");

  std::vector<std::pair<Param<T, B>*, std::vector<T>>> staged;
  staged.reserve(12);  // at most 12 tensors, so the references read() returns stay valid
  const auto read = [&](const char* name, Param<T, B>& p) -> std::vector<T>& {
    const Shape shape = p.shape();
    if constexpr (requires { file.template read_as<T, B>(prefix + name, &shape); })
      staged.emplace_back(&p, file.template read_as<T, B>(prefix + name, &shape).to_host());
    else
      staged.emplace_back(&p, file.template read<T, B>(prefix + name, &shape).to_host());
    return staged.back().second;
  };
  // Renumbers the state channels of `count` consecutive blocks of N channels starting at element
  // `first`, each channel `stride` contiguous values: channel n takes the reference's order[n].
  const auto renumber = [&](std::vector<T>& v, index_t first, index_t count, index_t stride) {
    const std::vector<T> src = v;
    for (index_t k = 0; k < count; ++k) {
      const index_t base = first + k * N * stride;
      for (index_t n = 0; n < N; ++n)
        for (index_t j = 0; j < stride; ++j)
          v[static_cast<std::size_t>(base + n * stride + j)] =
              src[static_cast<std::size_t>(base + order[static_cast<std::size_t>(n)] * stride + j)];
    }
  };
  // in_proj rows: z (di), x (di), B (R x N), C (R x N), ...; each row has d_model values.
  std::vector<T>& w_in = read("in_proj.weight", layer.in_proj.weight);
  renumber(w_in, 2 * di * c.d_model, 2 * R, c.d_model);
  read("dt_bias", layer.dt_bias);
  renumber(read("B_norm.weight", layer.B_norm), 0, 1, 1);
  renumber(read("C_norm.weight", layer.C_norm), 0, 1, 1);
  renumber(read("B_bias", layer.B_bias), 0, layer.heads() * R, 1);
  renumber(read("C_bias", layer.C_bias), 0, layer.heads() * R, 1);
  read("D", layer.D);
  if constexpr (R > 1) {
    read("mimo_x", layer.mimo_x);
    read("mimo_z", layer.mimo_z);
    read("mimo_o", layer.mimo_o);
  }
  if (c.is_outproj_norm) read("norm.weight", layer.norm);
  read("out_proj.weight", layer.out_proj.weight);
  for (auto& [p, host] : staged) p->var.mutable_value().assign(Tensor<T, B>::from_host(p->shape(), host));
}

}  // namespace megacpp
