// megacpp/optim/newton_schulz.hpp: orthogonalisation by a quintic Newton-Schulz iteration.
//
// Muon replaces a gradient G = U S V^T by (approximately) U V^T. With X_0 = G / (s ||G||_F + eps)
// (every singular value now in [0, 1]) each step applies an odd quintic to the singular values:
//   A = X X^T,   X' = a X + (b A + c A^2) X        (Jordan et al., "Muon", 2024;
//                                                   modded-nanogpt zeropower_via_newtonschulz5)
// NS5 uses (a, b, c) = (3.4445, -4.7750, 2.0315) for 5 steps: the slope at zero is maximised, so
// singular values end up in roughly [0.5, 1.5] rather than at 1 (modded-nanogpt docstring).
// PolarExpress uses a different (a, b, c) per step, chosen minimax-optimally (Amsel et al.,
// "The Polar Express", arXiv 2505.16932), and lands much closer to 1.
//
// Cost (the small side makes A small): for G (R, C), s = min(R, C), L = max(R, C), each step is
//   A = X X^T (s, s, L)  +  P = c A A (s, s, s)  +  X' = (a I + b A + P) X (s, L, s)
// = 2 s^2 (2 L + s) flops. Wide G (R <= C) runs as written; tall G runs on G itself with
// A = X^T X and X' = X (a I + b A + c A^2), the transpose of the wide iteration on G^T (A is
// symmetric), so no transposed copy is ever made. Folding a X into the polynomial (a I + ...)
// makes the last product one GEMM with beta = 0 and keeps every elementwise pass on (s, s).
//
// NS runs in the parameter's element type (fp32 or fp64) by default. newton_schulz_bf16() runs
// the same iteration with every GEMM operand rounded to bf16 (Backend::gemm_bf16: fp32 sums into
// fp32 results), as Muon does on G.bfloat16() in modded-nanogpt; the normalisation and the
// polynomial's elementwise pass stay fp32. MuonOptions::ns_bf16 selects it.
//
// newton_schulz_reference() below is the naive double-precision host version, written exactly
// as modded-nanogpt's Python (explicit transpose, A @ A, B @ X); tests compare the two.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <string_view>
#include <utility>
#include <vector>

#include "megacpp/core/tensor.hpp"
#include "megacpp/optim/functors.hpp"
#include "megacpp/optim/sum_of_squares.hpp"

namespace megacpp::optim {

/// One step's coefficients: X' = a X + b (X X^T) X + c (X X^T)^2 X.
struct QuinticCoefficients {
  double a;  ///< linear term (the slope at zero)
  double b;  ///< cubic term
  double c;  ///< quintic term
};

/// The Newton-Schulz coefficient schedule of Muon (Keller Jordan, modded-nanogpt): one
/// quintic repeated, 5 steps, after X = G / (||G||_F + 1e-7).
struct NS5 {
  static constexpr std::string_view name = "ns5";  ///< shown in routing tables and benches
  static constexpr int default_steps = 5;          ///< steps when MuonOptions::ns_steps is 0
  static constexpr double norm_scale = 1.0;        ///< s in X = G / (s ||G||_F + eps)
  static constexpr double eps = 1e-7;              ///< eps in X = G / (s ||G||_F + eps)
  /// Coefficients of step `step` (the same for every step).
  static constexpr QuinticCoefficients at(int /*step*/) { return {3.4445, -4.7750, 2.0315}; }
};

/// Polar Express (Amsel, Persson, Musco, Gower, arXiv 2505.16932): a minimax-optimal quintic per
/// step, computed for 5 steps with safety factor 2e-2 and cushion 2; the table and the
/// normalisation X = G / (1.02 ||G||_F + 1e-6) are those of modded-nanogpt and nanochat. Steps
/// past the table repeat its last entry.
struct PolarExpress {
  static constexpr std::string_view name = "polar_express";  ///< shown in routing tables and benches
  static constexpr int default_steps = 5;                    ///< the table's length
  static constexpr double norm_scale = 1.02;                 ///< the safety factor 1 + 2e-2
  static constexpr double eps = 1e-6;                        ///< as modded-nanogpt
  /// Coefficients of step `step`.
  static constexpr QuinticCoefficients at(int step) {
    constexpr std::array<QuinticCoefficients, 5> table{{
        {8.156554524902461, -22.48329292557795, 15.878769915207462},
        {4.042929935166739, -2.808917465908714, 0.5000178451051316},
        {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
        {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
        {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
    }};
    return table[static_cast<std::size_t>(std::clamp(step, 0, 4))];
  }
};

/// A Newton-Schulz coefficient policy: a name, a default step count, the pre-normalisation
/// (norm_scale, eps) and the coefficients of each step.
template <class P>
concept NsCoefficients = requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::default_steps } -> std::convertible_to<int>;
  { P::norm_scale } -> std::convertible_to<double>;
  { P::eps } -> std::convertible_to<double>;
  { P::at(0) } -> std::same_as<QuinticCoefficients>;
};

/// Floating-point operations of `steps` Newton-Schulz steps on a (rows, cols) matrix:
/// 2 s^2 (2 L + s) per step, s = min(rows, cols), L = max(rows, cols).
inline double newton_schulz_flops(index_t rows, index_t cols, int steps) {
  const double s = static_cast<double>(std::min(rows, cols)), l = static_cast<double>(std::max(rows, cols));
  return static_cast<double>(steps) * 2.0 * s * s * (2.0 * l + s);
}

/// Preallocated buffers for Newton-Schulz on (rows, cols) matrices: reused every step, so the
/// iteration allocates nothing.
template <class T, Backend B>
struct NsWorkspace {
  index_t rows = 0;          ///< R
  index_t cols = 0;          ///< C
  index_t small = 0;         ///< s = min(R, C)
  Tensor<T, B> x;            ///< iterate X: (R, C)
  Tensor<T, B> x_next;       ///< next iterate: (R, C)
  Tensor<T, B> gram;         ///< A = X X^T (wide) or X^T X (tall): (s, s)
  Tensor<T, B> poly;         ///< a I + b A + c A^2: (s, s)
  Tensor<T, B> identity;     ///< I: (s, s)
  Tensor<T, B> row_sums;     ///< per-row sums of squares of G: (R)
  Tensor<T, B> sum_sq;       ///< ||G||_F^2: (1)
  Tensor<T, B> input;        ///< scratch the caller may fill with G (Muon's Nesterov mix): (R, C)
  Tensor<bf16, B> x_bf16;     ///< X rounded to bf16 (newton_schulz_bf16 only; allocated on first use): (R, C)
  Tensor<bf16, B> gram_bf16;  ///< A rounded to bf16 (as x_bf16): (s, s)
  Tensor<bf16, B> poly_bf16;  ///< a I + b A + c A^2 rounded to bf16 (as x_bf16): (s, s)

  NsWorkspace() = default;
  /// Buffers for (rows, cols) matrices.
  NsWorkspace(index_t r, index_t c)
      : rows(r), cols(c), small(std::min(r, c)), x(Shape{r, c}), x_next(Shape{r, c}), gram(Shape{small, small}),
        poly(Shape{small, small}), identity(Shape{small, small}), row_sums(Shape{r}), sum_sq(Shape{1}),
        input(Shape{r, c}) {
    check(r > 0 && c > 0, "NsWorkspace", "needs a non-empty matrix, got (", r, ", ", c, ")");
    std::vector<T> eye(static_cast<std::size_t>(small * small), T(0));
    for (index_t i = 0; i < small; ++i) eye[static_cast<std::size_t>(i * small + i)] = T(1);
    identity = Tensor<T, B>::from_host(Shape{small, small}, eye);
  }
};

namespace detail {
// C (m, n) = alpha op(A) op(B) + beta C, all row-major with their natural leading dimensions.
template <class T, Backend B>
void gemm_rm(bool ta, bool tb, index_t m, index_t n, index_t k, T alpha, const T* a, const T* b, T beta, T* c) {
  B::template gemm<T>(GemmArgs::dense(ta, tb, m, n, k), alpha, a, b, beta, c);
}
}  // namespace detail

/// Writes the Newton-Schulz orthogonalisation of `g` ((ws.rows, ws.cols), backend memory) to
/// `out` (same shape, may not alias `g`), running `steps` steps of policy `P`. Only Backend
/// kernels run (reduce, map, gemm): no host synchronisation, no allocation.
template <NsCoefficients P, class T, Backend B>
void newton_schulz(const T* g, T* out, NsWorkspace<T, B>& ws, int steps) {
  check(steps >= 0, "newton_schulz", "steps must be >= 0, got ", steps);
  const index_t r = ws.rows, c = ws.cols, s = ws.small, n = r * c;
  const bool wide = r <= c;
  // X_0 = G / (norm_scale ||G||_F + eps); the norm stays on the device as a broadcast operand.
  sum_of_squares<T, B>(r, c, g, ws.row_sums.data(), ws.sum_sq.data());
  T* x = steps == 0 ? out : ws.x.data();
  B::template map<T>(n, 1, fn::DivideByFrobenius{P::norm_scale, P::eps}, x, In<T>{g}, In<T>{ws.sum_sq.data(), true});
  T* spare = ws.x_next.data();
  for (int k = 0; k < steps; ++k) {
    const QuinticCoefficients q = P::at(k);
    T* next = k + 1 == steps ? out : spare;
    // A = X X^T (wide, X (s, L)) or X^T X (tall, X (L, s)): (s, s)
    if (wide) detail::gemm_rm<T, B>(false, true, s, s, c, T(1), x, x, T(0), ws.gram.data());
    else detail::gemm_rm<T, B>(true, false, s, s, r, T(1), x, x, T(0), ws.gram.data());
    // P = c A A + b A + a I: (s, s)
    detail::gemm_rm<T, B>(false, false, s, s, s, static_cast<T>(q.c), ws.gram.data(), ws.gram.data(), T(0), ws.poly.data());
    B::template map<T>(s, s, fn::QuinticTail{q.a, q.b}, ws.poly.data(), In<T>{ws.poly.data()}, In<T>{ws.gram.data()},
                       In<T>{ws.identity.data()});
    // X' = P X (wide) or X P (tall): (R, C)
    if (wide) detail::gemm_rm<T, B>(false, false, r, c, r, T(1), ws.poly.data(), x, T(0), next);
    else detail::gemm_rm<T, B>(false, false, r, c, c, T(1), x, ws.poly.data(), T(0), next);
    spare = x;
    x = next;
  }
}

/// newton_schulz() with the GEMMs on bf16 operands (Backend::gemm_bf16): each step rounds X, A and
/// the polynomial to bf16 before the product that reads them; sums, results, the normalisation
/// and the elementwise pass stay fp32. The first call allocates the workspace's bf16 buffers.
template <NsCoefficients P, Backend B>
void newton_schulz_bf16(const float* g, float* out, NsWorkspace<float, B>& ws, int steps) {
  check(steps >= 0, "newton_schulz_bf16", "steps must be >= 0, got ", steps);
  const index_t r = ws.rows, c = ws.cols, s = ws.small, n = r * c;
  const bool wide = r <= c;
  if (!ws.x_bf16.defined()) {
    ws.x_bf16 = Tensor<bf16, B>(Shape{r, c});
    ws.gram_bf16 = Tensor<bf16, B>(Shape{s, s});
    ws.poly_bf16 = Tensor<bf16, B>(Shape{s, s});
  }
  const auto to_bf16 = [](const float* src, index_t count, bf16* dst) {
    B::template convert<float, bf16>(static_cast<std::size_t>(count), src, dst);
  };
  const auto gemm = [](bool ta, bool tb, index_t m, index_t nn, index_t k, float alpha, const bf16* a, const bf16* b, float* y) {
    B::gemm_bf16(GemmArgs::dense(ta, tb, m, nn, k), alpha, a, b, 0.0f, y);
  };
  sum_of_squares<float, B>(r, c, g, ws.row_sums.data(), ws.sum_sq.data());
  float* x = steps == 0 ? out : ws.x.data();
  B::template map<float>(n, 1, fn::DivideByFrobenius{P::norm_scale, P::eps}, x, In<float>{g}, In<float>{ws.sum_sq.data(), true});
  float* spare = ws.x_next.data();
  bf16* x16 = ws.x_bf16.data();
  bf16* gram16 = ws.gram_bf16.data();
  bf16* poly16 = ws.poly_bf16.data();
  for (int k = 0; k < steps; ++k) {
    const QuinticCoefficients q = P::at(k);
    float* next = k + 1 == steps ? out : spare;
    to_bf16(x, n, x16);
    if (wide) gemm(false, true, s, s, c, 1.0f, x16, x16, ws.gram.data());  // A = X X^T
    else gemm(true, false, s, s, r, 1.0f, x16, x16, ws.gram.data());       // A = X^T X
    to_bf16(ws.gram.data(), s * s, gram16);
    gemm(false, false, s, s, s, static_cast<float>(q.c), gram16, gram16, ws.poly.data());  // c A A
    B::template map<float>(s, s, fn::QuinticTail{q.a, q.b}, ws.poly.data(), In<float>{ws.poly.data()},
                           In<float>{ws.gram.data()}, In<float>{ws.identity.data()});
    to_bf16(ws.poly.data(), s * s, poly16);
    if (wide) gemm(false, false, r, c, r, 1.0f, poly16, x16, next);  // X' = P X
    else gemm(false, false, r, c, c, 1.0f, x16, poly16, next);       // X' = X P
    spare = x;
    x = next;
  }
}

/// Naive reference (host, double): modded-nanogpt's zeropower_via_newtonschulz5 line by line, for a
/// row-major (rows, cols) matrix. Transposes tall inputs, iterates A = X X^T, B = b A + c A A,
/// X = a X + B X, transposes back. O(steps s^2 L) scalar loops: for tests and small benches.
template <NsCoefficients P>
std::vector<double> newton_schulz_reference(const std::vector<double>& g, index_t rows, index_t cols, int steps) {
  check(static_cast<index_t>(g.size()) == rows * cols, "newton_schulz_reference", "needs ", rows * cols,
        " values for (", rows, ", ", cols, "), got ", g.size());
  const bool tall = rows > cols;
  const index_t m = tall ? cols : rows, l = tall ? rows : cols;  // X is (m, l), m <= l
  std::vector<double> x(static_cast<std::size_t>(m * l));
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) x[static_cast<std::size_t>(tall ? j * l + i : i * l + j)] = g[static_cast<std::size_t>(i * cols + j)];
  double norm = 0;
  for (double v : x) norm += v * v;
  norm = std::sqrt(norm);
  for (double& v : x) v /= P::norm_scale * norm + P::eps;
  std::vector<double> a(static_cast<std::size_t>(m * m)), bm(static_cast<std::size_t>(m * m)), bx(x.size());
  const auto at = [](std::vector<double>& v, index_t ld, index_t i, index_t j) -> double& { return v[static_cast<std::size_t>(i * ld + j)]; };
  for (int k = 0; k < steps; ++k) {
    const QuinticCoefficients q = P::at(k);
    for (index_t i = 0; i < m; ++i)  // A = X X^T
      for (index_t j = 0; j < m; ++j) {
        double acc = 0;
        for (index_t t = 0; t < l; ++t) acc += at(x, l, i, t) * at(x, l, j, t);
        at(a, m, i, j) = acc;
      }
    for (index_t i = 0; i < m; ++i)  // B = b A + c A A
      for (index_t j = 0; j < m; ++j) {
        double acc = 0;
        for (index_t t = 0; t < m; ++t) acc += at(a, m, i, t) * at(a, m, t, j);
        at(bm, m, i, j) = q.b * at(a, m, i, j) + q.c * acc;
      }
    for (index_t i = 0; i < m; ++i)  // X = a X + B X
      for (index_t j = 0; j < l; ++j) {
        double acc = 0;
        for (index_t t = 0; t < m; ++t) acc += at(bm, m, i, t) * at(x, l, t, j);
        at(bx, l, i, j) = q.a * at(x, l, i, j) + acc;
      }
    std::swap(x, bx);
  }
  std::vector<double> out(g.size());
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) out[static_cast<std::size_t>(i * cols + j)] = x[static_cast<std::size_t>(tall ? j * l + i : i * l + j)];
  return out;
}

}  // namespace megacpp::optim
