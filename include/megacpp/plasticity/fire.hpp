// megacpp/plasticity/fire.hpp: FIRE, a one-shot orthogonalisation of selected 2-D weights.
//
// FIRE (Han, Park, Oh, Kim, Lee, Kim, "FIRE: Frobenius-Isometry Reinitialization for Balancing the
// Stability-Plasticity Tradeoff", ICLR 2026, arXiv 2602.08040) replaces a weight W (R, C) by the nearest matrix with
// orthogonal rows or columns, the polar factor U V^T of W = U S V^T, rescaled. It is applied once,
// at a phase boundary (docs/systems/plasticity.md), never repeatedly inside a phase: re-orthogonalising
// every few steps stops being a reset and starts fighting the optimiser. FireLedger enforces it.
//
// The iteration (fp32 for fp32 weights; docs/systems/plasticity.md "Which orthogonalisation"):
//   X_0 = W / ||W||_F                                  (every singular value in (0, 1])
//   5 warm-up steps of Muon's quintic NS5               (optim/newton_schulz.hpp: a = 3.4445,
//     X' = X (a I + b G + c G^2),  G = X^T X            b = -4.7750, c = 2.0315)
//   then the cubic Newton-Schulz step until it stops moving
//     X' = X (1.5 I - 0.5 G)                           (Higham, "Functions of Matrices", 8.3)
// NS5 alone is not enough: its coefficients maximise the slope at zero, so after 5 steps the
// singular values sit in roughly [0.7, 1.2], not at 1 (Muon wants speed, not convergence). The
// cubic step is the Newton-Schulz iteration for the polar factor; it converges quadratically
// for singular values in (0, sqrt(3)), so from NS5's output a few steps reach the fp32 floor. We
// stop when ||X' - X||_F / ||X||_F <= tolerance (1e-4: the error after that step is about
// 1.5 tolerance^2), and throw after max_steps.
//
// Scale: the result is X ||W||_F / sqrt(min(R, C)), so ||W'||_F = ||W||_F (the matrix's RMS is
// kept: the layer's output scale, and with it every downstream norm and learning rate, stays
// where training left it). Then W'^T W' = s^2 I (tall) or W' W'^T = s^2 I (wide), s^2 =
// ||W||_F^2 / min(R, C). (The old plan rescaled by sqrt(R / C); that changes the RMS of every
// non-square matrix, which is a second intervention hidden in the first.)
//
// Shards: a rank passes only its rows [begin, end) of W. G = X^T X (C, C) is the sum of every
// rank's X_r^T X_r, and ||W||_F^2 and the step's change the sums of the ranks' parts; all three
// are summed over ranks (shard.hpp), after which every rank updates its own rows X_r' = X_r P.
// The C x C Gram costs C^3 per step for a wide matrix where R^3 would do; FIRE runs once a
// phase, and one formulation for every shape keeps world 1 and world N the same arithmetic.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "megacpp/optim/newton_schulz.hpp"
#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/state.hpp"
#include "megacpp/plasticity/shard.hpp"
#include "megacpp/plasticity/targets.hpp"

namespace megacpp::plasticity {

/// How FIRE orthogonalises.
struct FireOptions {
  int warm_steps = 5;        ///< NS5 quintic steps before the cubic iteration
  int max_steps = 100;       ///< cubic steps before giving up (rank-deficient W converges slowly)
  double tolerance = 1e-4;   ///< stop when ||X' - X||_F / ||X||_F <= tolerance
};

/// What FIRE did to one matrix.
struct FireResult {
  bool skipped = false;  ///< W was zero: nothing to orthogonalise, left unchanged
  int steps = 0;         ///< cubic steps taken
  double norm = 0;       ///< ||W||_F (whole matrix)
  double scale = 0;      ///< s = ||W||_F / sqrt(min(R, C)): W'^T W' = s^2 I
};

namespace detail {
// local (n, C) rows X; returns G = sum over ranks of X^T X, (C, C), in T.
template <class T, Backend B, class Comm>
Tensor<T, B> global_gram(const Tensor<T, B>& x, index_t n, index_t c, Comm& comm) {
  Tensor<T, B> g(Shape{c, c});
  if (n > 0) B::template gemm<T>(GemmArgs::dense(true, false, c, c, n), T(1), x.data(), x.data(), T(0), g.data());
  else g.fill(T(0));
  if (comm.size() == 1) return g;
  const std::vector<T> local = g.to_host();
  std::vector<double> sum(local.begin(), local.end());
  sum_over_ranks<B>(comm, sum);
  std::vector<T> back(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) back[i] = static_cast<T>(sum[i]);
  return Tensor<T, B>::from_host(Shape{c, c}, back);
}

template <class T>
double sum_sq(const std::vector<T>& v) {
  double s = 0;
  for (const T& x : v) s += static_cast<double>(x) * static_cast<double>(x);
  return s;
}
}  // namespace detail

/// Orthogonalises the rows `local` ((range.size(), C), rows [range.begin, range.end) of a
/// (global_rows, C) matrix W) in place, as described above, with whole-matrix statistics summed
/// over `comm`. Every rank of `comm` must call it for the same matrix. A zero W is left as it is.
template <class T, Backend B, class Comm = dist::SingleProcess>
  requires dist::GatherComm<Comm, double, B>
FireResult fire_rows(Tensor<T, B>& local, index_t global_rows, RowRange range, Comm& comm, const FireOptions& o = {}) {
  check(local.rank() == 2, "fire", "FIRE takes 2-D matrices only, got shape ", local.shape());
  check(range.size() == local.size(0) && range.begin >= 0 && range.end <= global_rows, "fire", "local rows ",
        local.shape(), " do not match the owned range [", range.begin, ", ", range.end, ") of ", global_rows, " rows");
  check(o.warm_steps >= 0 && o.max_steps >= 1 && o.tolerance > 0, "fire", "warm_steps must be >= 0, max_steps >= 1 and ",
        "tolerance > 0, got ", o.warm_steps, ", ", o.max_steps, ", ", o.tolerance);
  const index_t n = local.size(0), c = local.size(1);
  FireResult r;
  std::vector<T> x = local.to_host();
  std::vector<double> stat{detail::sum_sq(x)};
  sum_over_ranks<B>(comm, stat);
  r.norm = std::sqrt(stat[0]);
  if (r.norm == 0) {
    r.skipped = true;
    return r;
  }
  for (T& v : x) v = static_cast<T>(static_cast<double>(v) / r.norm);
  Tensor<T, B> xt = Tensor<T, B>::from_host(Shape{n, c}, x), next(Shape{n, c}), poly(Shape{c, c}), g2(Shape{c, c});
  // One step X' = X (a I + b G + c G^2); returns ||X' - X||_F / ||X||_F over every rank.
  const auto step = [&](optim::QuinticCoefficients q) {
    const Tensor<T, B> g = detail::global_gram<T, B>(xt, n, c, comm);
    if (q.c != 0) B::template gemm<T>(GemmArgs::dense(false, false, c, c, c), T(1), g.data(), g.data(), T(0), g2.data());
    const std::vector<T> gh = g.to_host();
    const std::vector<T> g2h = q.c != 0 ? g2.to_host() : std::vector<T>(gh.size(), T(0));
    std::vector<T> p(gh.size());
    for (index_t i = 0; i < c; ++i)
      for (index_t j = 0; j < c; ++j) {
        const auto k = static_cast<std::size_t>(i * c + j);
        p[k] = static_cast<T>((i == j ? q.a : 0.0) + q.b * static_cast<double>(gh[k]) + q.c * static_cast<double>(g2h[k]));
      }
    poly = Tensor<T, B>::from_host(Shape{c, c}, p);
    if (n > 0) B::template gemm<T>(GemmArgs::dense(false, false, n, c, c), T(1), xt.data(), poly.data(), T(0), next.data());
    const std::vector<T> before = xt.to_host(), after = next.to_host();
    std::vector<double> s{0.0, detail::sum_sq(before)};
    for (std::size_t i = 0; i < before.size(); ++i) {
      const double d = static_cast<double>(after[i]) - static_cast<double>(before[i]);
      s[0] += d * d;
    }
    sum_over_ranks<B>(comm, s);
    std::swap(xt, next);
    return std::sqrt(s[0] / s[1]);
  };
  for (int k = 0; k < o.warm_steps; ++k) step(optim::NS5::at(k));
  double change = 0;
  do {
    change = step(optim::QuinticCoefficients{1.5, -0.5, 0.0});
    ++r.steps;
  } while (change > o.tolerance && r.steps < o.max_steps);
  check(change <= o.tolerance, "fire", "the cubic Newton-Schulz iteration did not converge in ", o.max_steps,
        " steps (last relative change ", change, " > tolerance ", o.tolerance,
        "): the matrix is close to rank-deficient; raise FireOptions::max_steps or leave it out of the targets");
  r.scale = r.norm / std::sqrt(static_cast<double>(std::min(global_rows, c)));
  std::vector<T> out = xt.to_host();
  for (T& v : out) v = static_cast<T>(static_cast<double>(v) * r.scale);
  local.assign(Tensor<T, B>::from_host(Shape{n, c}, out));
  return r;
}

/// fire_rows() on a whole matrix in this process.
template <class T, Backend B>
FireResult fire_matrix(Tensor<T, B>& w, const FireOptions& o = {}) {
  check(w.rank() == 2, "fire", "FIRE takes 2-D matrices only, got shape ", w.shape());
  dist::SingleProcess single;
  return fire_rows<T, B>(w, w.size(0), all_rows(w.size(0)), single, o);
}

/// Which parameters FIRE has rewritten in which phase: FIRE runs once per phase per parameter,
/// and a second request in the same phase is an error unless forced. Saved with the run's state
/// (the trainer writes it to the checkpoint) so a resumed run neither repeats nor skips FIRE.
struct FireLedger {
  std::map<std::string, int> phase_of;  ///< parameter name -> the last phase FIRE rewrote it in

  /// Throws when `name` was already rewritten in `phase` and `force` is false.
  void check_allowed(const std::string& name, int phase, bool force) const {
    const auto it = phase_of.find(name);
    check(force || it == phase_of.end() || it->second != phase, "fire", "'", name, "' was already orthogonalised in phase ",
          phase, ": FIRE is one-shot per phase (repeating it fights the optimiser); pass force to do it anyway");
  }
  /// True when `name` was rewritten in `phase`.
  bool done(const std::string& name, int phase) const {
    const auto it = phase_of.find(name);
    return it != phase_of.end() && it->second == phase;
  }
};

/// One matrix of a FIRE pass.
struct FireEntry {
  std::string name;   ///< parameter
  FireResult result;  ///< what FIRE did
};

/// FIRE over every parameter of `params` that `targets` selects (2-D Role::matrix only): each is
/// orthogonalised, recorded in `ledger` under `phase`, and its optimiser state is cleared
/// (opt.reset_state: Muon momentum, AdamW moments and step, of exactly these parameters). All
/// targets are checked against the ledger before any is changed. World size 1 (each rank holding
/// whole parameters); fire_rows() is the sharded form.
template <class T, Backend B, optim::Optimizer Opt>
std::vector<FireEntry> fire(std::vector<optim::ParamRef<T, B>>& params, FireTargets targets, int phase, FireLedger& ledger,
                            Opt& opt, const FireOptions& o = {}, bool force = false) {
  std::vector<optim::ParamRef<T, B>*> chosen;
  for (optim::ParamRef<T, B>& p : params)
    if (is_fire_target(p.name, p.role, p.shape(), targets)) {
      ledger.check_allowed(p.name, phase, force);
      check(opt.owns(p.name), "fire", "'", p.name, "' is not owned by the optimiser whose state FIRE must clear");
      chosen.push_back(&p);
    }
  std::vector<FireEntry> out;
  std::vector<std::string> rewritten;
  for (optim::ParamRef<T, B>* p : chosen) {
    FireEntry e{p->name, fire_matrix<T, B>(p->value(), o)};
    ledger.phase_of[p->name] = phase;
    if (!e.result.skipped) rewritten.push_back(p->name);
    out.push_back(std::move(e));
  }
  opt.reset_state(rewritten);
  return out;
}

}  // namespace megacpp::plasticity
