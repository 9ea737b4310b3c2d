// Shared helpers of the optimiser tests: a small model with a Param of every Role, gradient
// setters, bitwise comparison and singular values.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "megacpp/optim.hpp"

// Eigen's SVD after megacpp (which includes Eigen/Core behind its GCC 12 warning guard).
#include <Eigen/QR>
#include <Eigen/SVD>

namespace megacpp::testing {

// A 2-block model with one Param of every Role, shaped like the real thing:
//   embed (V, D) tied to the head, per block attention (D, D) / (D, D/4) projections, MLP
//   (D, 4D) / (4D, D), RMSNorm gains, a router with a bias, learned scalars, and an MTP module.
template <class T>
struct ToyLM {
  static constexpr index_t V = 40, D = 16;
  struct Block {
    Param<T, Cpu> attn_norm, wq, wk, wv, wo, mlp_norm, w1, w2;
    template <class Visitor>
    void for_each_param(Visitor&& visit, const std::string& prefix = "") {
      visit(child_name(prefix, "attn_norm"), attn_norm);
      visit(child_name(prefix, "wq"), wq);
      visit(child_name(prefix, "wk"), wk);
      visit(child_name(prefix, "wv"), wv);
      visit(child_name(prefix, "wo"), wo);
      visit(child_name(prefix, "mlp_norm"), mlp_norm);
      visit(child_name(prefix, "w1"), w1);
      visit(child_name(prefix, "w2"), w2);
    }
  };
  Param<T, Cpu> embed, final_norm, router, router_bias, lambdas, mtp_proj, mtp_norm, head;
  std::vector<Block> blocks;
  bool tied = true;

  explicit ToyLM(std::uint64_t seed, bool tie = true) : tied(tie) {
    Rng rng(seed);
    using P = Param<T, Cpu>;
    embed = P::normal({V, D}, Role::embedding, rng, 0.5);
    for (int l = 0; l < 2; ++l) {
      Block b;
      b.attn_norm = P::normal({D}, Role::norm_gain, rng, 0.1);
      b.wq = P::normal({D, D}, Role::matrix, rng, 0.3);
      b.wk = P::normal({D, D / 4}, Role::matrix, rng, 0.3);
      b.wv = P::normal({D, D / 4}, Role::matrix, rng, 0.3);
      b.wo = P::normal({D, D}, Role::matrix, rng, 0.3);
      b.mlp_norm = P::normal({D}, Role::norm_gain, rng, 0.1);
      b.w1 = P::normal({D, 4 * D}, Role::matrix, rng, 0.3);
      b.w2 = P::normal({4 * D, D}, Role::matrix, rng, 0.3);
      blocks.push_back(std::move(b));
    }
    final_norm = P::normal({D}, Role::norm_gain, rng, 0.1);
    router = P::normal({D, 4}, Role::router, rng, 0.3);
    router_bias = P::normal({4}, Role::bias, rng, 0.1);
    lambdas = P::normal({2}, Role::scalar, rng, 0.1);
    mtp_proj = P::normal({2 * D, D}, Role::mtp, rng, 0.3);
    mtp_norm = P::normal({D}, Role::mtp, rng, 0.1);
    if (!tied) head = P::normal({D, V}, Role::head, rng, 0.3);
  }

  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    visit(child_name(prefix, "embed"), embed);
    for (std::size_t l = 0; l < blocks.size(); ++l) blocks[l].for_each_param(visit, child_name(prefix, "blocks." + std::to_string(l)));
    visit(child_name(prefix, "final_norm"), final_norm);
    visit(child_name(prefix, "router"), router);
    visit(child_name(prefix, "router_bias"), router_bias);
    visit(child_name(prefix, "lambdas"), lambdas);
    visit(child_name(prefix, "mtp.proj"), mtp_proj);
    visit(child_name(prefix, "mtp.norm"), mtp_norm);
    if (tied) visit(child_name(prefix, "lm_head"), embed);  // the tied head: the same Param again
    else visit(child_name(prefix, "lm_head"), head);
  }
};

// Overwrites the gradient of every parameter with deterministic normal values (seeded per step).
template <class T>
void set_random_grads(const std::vector<optim::ParamRef<T, Cpu>>& params, std::uint64_t seed, double std = 1.0) {
  Rng rng(seed);
  for (const auto& p : params) p.grad_buffer().assign(randn<T, Cpu>(p.shape(), rng, std));
}

// Sets a parameter's gradient from host values.
template <class T>
void set_grad(Param<T, Cpu>& p, std::vector<T> values) {
  p.var.grad_buffer().assign(Tensor<T, Cpu>::from_host(p.shape(), values));
}

// True when both tensors hold bitwise identical elements.
template <class T>
bool bitwise_equal(const Tensor<T, Cpu>& a, const Tensor<T, Cpu>& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.numel())) == 0;
}

// Copies of every parameter value, in order (to compare models after steps).
template <class T>
std::vector<Tensor<T, Cpu>> snapshot_values(const std::vector<optim::ParamRef<T, Cpu>>& params) {
  std::vector<Tensor<T, Cpu>> out;
  for (const auto& p : params) out.push_back(p.var.value().clone());
  return out;
}

// ||NS_bf16(G) - NS_fp32(G)||_F / ||NS_fp32(G)||_F allowed for Newton-Schulz on bf16 GEMM operands
// (newton_schulz_bf16). Each step rounds X, X X^T and the polynomial to bf16 (relative 2^-9 per
// element) and the quintic's slope near zero (a = 3.4 for NS5, 8.2 for Polar Express's first step)
// amplifies what lands on the small singular directions: measured 0.018-0.028 on random (48-64, 96-200)
// inputs and 0.05 at condition number 3e2 (both coefficient sets). A wrong product moves the
// result by O(1).
inline constexpr double kNsBf16Tolerance = 0.1;

// Singular values (descending) of a row-major (rows, cols) matrix.
inline std::vector<double> singular_values(const std::vector<double>& m, index_t rows, index_t cols) {
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Mat a = Eigen::Map<const Mat>(m.data(), rows, cols);
  const Eigen::JacobiSVD<Mat> svd(a);
  const auto& s = svd.singularValues();
  return std::vector<double>(s.data(), s.data() + s.size());
}

// A (rows, cols) matrix U diag(sigma) V^T with random orthonormal U, V (Householder QR of
// Gaussian matrices) and the given singular values.
inline std::vector<double> matrix_with_spectrum(index_t rows, index_t cols, const std::vector<double>& sigma, std::uint64_t seed) {
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  Rng rng(seed);
  const index_t k = std::min(rows, cols);
  Mat gu(rows, rows), gv(cols, cols);
  for (index_t i = 0; i < rows * rows; ++i) gu.data()[i] = rng.normal();
  for (index_t i = 0; i < cols * cols; ++i) gv.data()[i] = rng.normal();
  const Mat u = Eigen::HouseholderQR<Mat>(gu).householderQ();
  const Mat v = Eigen::HouseholderQR<Mat>(gv).householderQ();
  Mat s = Mat::Zero(rows, cols);
  for (index_t i = 0; i < k; ++i) s(i, i) = sigma[static_cast<std::size_t>(i)];
  const Mat g = u * s * v.transpose();
  std::vector<double> out(static_cast<std::size_t>(rows * cols));
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) out[static_cast<std::size_t>(i * cols + j)] = g(i, j);
  return out;
}

}  // namespace megacpp::testing
