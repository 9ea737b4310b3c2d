// megacpp/nn/mamba/config.hpp: dimensions and policies of the Mamba mixers.
//
// Defaults follow the references: Mamba-3 (state-spaces/mamba mamba_ssm/modules/mamba3.py):
// headdim 64, d_state 128, expand 2, rope_fraction 0.5, dt in [0.001, 0.1] at init, A_floor 1e-4,
// chunk 64 (64 / R for MIMO, as the reference recommends). Mamba-2 (mamba2_simple.py): conv
// kernel 4, A = -exp(A_log) with A_log = log U(1, 16), gated RMSNorm before out_proj.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "megacpp/core/error.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/nn/mamba/chunked_scan.hpp"
#include "megacpp/nn/mamba/conv1d.hpp"

namespace megacpp {

/// Mamba-3 single-input single-output: one rank, the reference's default variant.
struct SISO {
  static constexpr index_t rank = 1;                  ///< R: inputs per head and token
  static constexpr index_t default_chunk_size = 64;   ///< chunk length (tokens) of the training scan
  static constexpr const char* name = "SISO";     ///< policy name for logs
};

/// Mamba-3 multi-input multi-output with rank R (paper default 4): x and z are up-projected to R
/// copies per head (mimo_x, mimo_z), B and C carry R rows, and mimo_o sums the R outputs.
template <index_t R = 4>
struct MIMO {
  static_assert(R >= 2 && R <= 16, "megacpp_mimo_rank_out_of_range: use SISO for rank 1; MIMO<R> takes 2 <= R <= 16");
  static constexpr index_t rank = R;                               ///< R: inputs per head and token
  static constexpr index_t default_chunk_size = 64 / R > 0 ? 64 / R : 1;  ///< 64 / R tokens = 64 scan rows
  static constexpr const char* name = "MIMO";     ///< policy name for logs
};

/// Which scan a layer's forward runs.
enum class ScanKind {
  chunked,     ///< the chunked parallel form with hand-written backward (training; default)
  sequential,  ///< the literal recurrence, forward only (reference; evaluation)
};

/// Mamba-3 dimensions and initialisation.
struct Mamba3Config {
  index_t d_model = 0;         ///< width of the residual stream
  index_t d_state = 128;       ///< N: state size per head
  index_t expand = 2;          ///< d_inner = expand * d_model
  index_t headdim = 64;        ///< P: channels per head; heads = d_inner / headdim
  double rope_fraction = 0.5;  ///< fraction of d_state rotated by the data-dependent angles
  double dt_min = 0.001;       ///< dt at init is log-uniform in [dt_min, dt_max]
  double dt_max = 0.1;         ///< upper end of dt at init
  double dt_init_floor = 1e-4; ///< dt at init is at least this
  double A_floor = 1e-4;       ///< A = -phi(dd_A) is clamped to <= -A_floor
  double norm_eps = 1e-5;      ///< eps of the RMSNorms on B and C
  index_t chunk_size = 0;      ///< training scan chunk length; 0 = the policy's default
  ScanKind scan = ScanKind::chunked;  ///< which scan forward runs (chunked for training)
  bool zero_init_out_proj = true;  ///< zero out_proj at init (residual branch starts as identity, modded-nanogpt)
  bool is_outproj_norm = false;    ///< RMSNorm of y per head (gain `norm`) before the gate; off, as in the reference

  /// expand * d_model.
  index_t d_inner() const { return expand * d_model; }
  /// d_inner / headdim.
  index_t heads() const { return d_inner() / headdim; }
  /// Angles per head: floor(d_state * rope_fraction) rounded down to even, halved (the reference's rule).
  index_t n_angles() const {
    index_t rotated = static_cast<index_t>(static_cast<double>(d_state) * rope_fraction);
    if (rotated % 2) --rotated;
    return rotated / 2;
  }

  /// Throws megacpp::Error naming the value when the head layout cannot be built.
  void validate(const char* who) const {
    check(d_model > 0 && d_state > 0 && expand > 0 && headdim > 0, who, "d_model, d_state, expand and headdim must be positive, got ",
          d_model, ", ", d_state, ", ", expand, ", ", headdim);
    check(d_inner() % headdim == 0, who, "d_inner = expand * d_model = ", expand, " * ", d_model, " = ", d_inner(),
          " is not divisible by headdim ", headdim);
    check(rope_fraction > 0 && rope_fraction <= 1, who, "rope_fraction must be in (0, 1], got ", rope_fraction);
    check(n_angles() > 0, who, "d_state ", d_state, " with rope_fraction ", rope_fraction, " leaves no pair to rotate");
    check(dt_min > 0 && dt_max >= dt_min && dt_init_floor > 0, who, "need 0 < dt_min <= dt_max and dt_init_floor > 0, got ",
          dt_min, ", ", dt_max, ", ", dt_init_floor);
    check(A_floor > 0, who, "A_floor must be positive, got ", A_floor);
    check(chunk_size >= 0, who, "chunk_size must be >= 0 (0 = default), got ", chunk_size);
  }
};

/// Mamba-2 (SSD) dimensions and initialisation.
struct Mamba2Config {
  index_t d_model = 0;      ///< width of the residual stream
  index_t d_state = 128;    ///< N: state size
  index_t d_conv = 4;       ///< causal conv1d kernel width
  index_t expand = 2;       ///< d_inner = expand * d_model
  index_t headdim = 64;     ///< P: channels per head
  index_t ngroups = 1;      ///< B/C groups shared by heads / ngroups heads each
  double A_init_min = 1.0;  ///< A = -exp(A_log) with -A uniform in [A_init_min, A_init_max] at init
  double A_init_max = 16.0; ///< upper end of -A at init
  double dt_min = 0.001;    ///< dt at init is log-uniform in [dt_min, dt_max]
  double dt_max = 0.1;      ///< upper end of dt at init
  double dt_init_floor = 1e-4;  ///< dt at init is at least this
  double norm_eps = 1e-5;   ///< eps of the gated RMSNorm
  index_t chunk_size = kDefaultScanChunk;  ///< training scan chunk length
  ScanKind scan = ScanKind::chunked;  ///< which scan forward runs (chunked for training)
  bool zero_init_out_proj = true;     ///< zero out_proj at init (residual branch starts as identity)

  /// expand * d_model.
  index_t d_inner() const { return expand * d_model; }
  /// d_inner / headdim.
  index_t heads() const { return d_inner() / headdim; }
  /// Channels of the conv1d: x, B and C, d_inner + 2 ngroups d_state.
  index_t conv_dim() const { return d_inner() + 2 * ngroups * d_state; }

  /// Throws megacpp::Error naming the value when the head layout cannot be built.
  void validate(const char* who) const {
    check(d_model > 0 && d_state > 0 && expand > 0 && headdim > 0 && ngroups > 0, who,
          "d_model, d_state, expand, headdim and ngroups must be positive, got ", d_model, ", ", d_state, ", ", expand,
          ", ", headdim, ", ", ngroups);
    check(d_inner() % headdim == 0, who, "d_inner = expand * d_model = ", expand, " * ", d_model, " = ", d_inner(),
          " is not divisible by headdim ", headdim);
    check(heads() % ngroups == 0, who, "heads (", heads(), ") must be a multiple of ngroups (", ngroups, ")");
    check(d_conv >= 1 && d_conv <= kMaxConv1dWidth, who, "d_conv must be in [1, ", kMaxConv1dWidth, "], got ", d_conv);
    check(A_init_min > 0 && A_init_max >= A_init_min, who, "need 0 < A_init_min <= A_init_max, got ", A_init_min, ", ", A_init_max);
    check(dt_min > 0 && dt_max >= dt_min && dt_init_floor > 0, who, "need 0 < dt_min <= dt_max and dt_init_floor > 0, got ",
          dt_min, ", ", dt_max, ", ", dt_init_floor);
    check(chunk_size >= 1, who, "chunk_size must be >= 1, got ", chunk_size);
  }
};

namespace detail {
// dt_bias so that softplus(dt_bias) = dt with dt log-uniform in [dt_min, dt_max], floored:
// the inverse softplus dt + log(-expm1(-dt)) (mamba_ssm's dt_bias init; pytorch issue 72759).
inline double sample_dt_bias(Rng& rng, double dt_min, double dt_max, double floor) {
  const double dt = std::max(floor, std::exp(rng.uniform(std::log(dt_min), std::log(dt_max))));
  return dt + std::log(-std::expm1(-dt));
}
}  // namespace detail

}  // namespace megacpp
