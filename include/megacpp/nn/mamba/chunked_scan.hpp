// megacpp/nn/mamba/chunked_scan.hpp: the training scan, one graph node with a hand-written backward.
//
// chunked_scan(in, docs, chunk_size) computes, per (row, head), the recurrence of
// megacpp/nn/mamba/scan_inputs.hpp in the chunked parallel form (chunks of `chunk_size` tokens
// aligned to document starts; the contract is megacpp/core/kernels/ssm_scan.hpp, the CPU kernel's
// derivation megacpp/backends/cpu/detail/ssm/common.hpp), O(T) time
// and memory: the only activations it saves are the states entering each chunk,
// (batch, heads, chunks, N, P). The backward recomputes the intra-chunk matrices chunk by chunk.
// Its naive reference is sequential_scan (megacpp/nn/mamba/sequential_scan.hpp).
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/kernels/ssm_scan.hpp"
#include "megacpp/nn/mamba/scan_inputs.hpp"

namespace megacpp {

/// Default chunk length of the chunked scan (the Mamba-3 reference's SISO default).
inline constexpr index_t kDefaultScanChunk = 64;

/// The SSM scan in chunked form: y (batch, seq, heads, R, P) = H_t q_t + D v_t per token and rank.
/// Differentiable in every operand of `in`.
template <class T, Backend B>
Var<T, B> chunked_scan(const ScanInputs<T, B>& in, const DocumentLayout<B>& docs, index_t chunk_size = kDefaultScanChunk) {
  using Kernel = kernels::SsmScan<B>;
  const ScanGeometry g = detail::check_scan_inputs("chunked_scan", in, docs);
  check(chunk_size >= 1, "chunked_scan", "chunk_size must be >= 1, got ", chunk_size);
  const kernels::ScanParams p{g.batch, g.seq, g.heads, g.groups, g.rank, g.d_state, g.head_dim, chunk_size,
                              kernels::max_chunks_per_row(docs.doc_ids_host, g.batch, g.seq, chunk_size)};
  const bool needs_grad = grad_enabled() && (in.q.requires_grad() || in.k.requires_grad() || in.v.requires_grad() ||
                                             in.log_alpha.requires_grad() || in.gamma.requires_grad() ||
                                             (in.shift.defined() && in.shift.requires_grad()) ||
                                             (in.D.defined() && in.D.requires_grad()));
  Tensor<T, B> y(Shape{g.batch, g.seq, g.heads, g.rank, g.head_dim});
  // states entering each chunk: (batch, heads, max_chunks, N, P), kept for the backward only
  Tensor<T, B> states = needs_grad ? Tensor<T, B>(Shape{g.batch, g.heads, p.max_chunks, g.d_state, g.head_dim}) : Tensor<T, B>();
  Kernel::template forward<T>(p, docs, detail::scan_operands(in), y.data(), needs_grad ? states.data() : nullptr);
  if (!needs_grad) return Var<T, B>(std::move(y));
  std::vector<Var<T, B>> operands{in.q, in.k, in.v, in.log_alpha, in.gamma};
  if (in.shift.defined()) operands.push_back(in.shift);
  if (in.D.defined()) operands.push_back(in.D);
  return make_result("chunked_scan", std::move(y), [in, g, p, docs, states](const Tensor<T, B>& dy) mutable {
    auto grad_of = [](const Var<T, B>& v) -> T* { return v.defined() && v.requires_grad() ? v.grad_buffer().data() : nullptr; };
    // dq, dk come out per head; with fewer groups than heads they are summed over each group's
    // heads afterwards (in head order: deterministic, no atomics).
    const bool per_group = g.groups != g.heads;
    const Shape per_head{g.batch, g.seq, g.heads, g.rank, g.d_state};
    Tensor<T, B> dq_heads = per_group && in.q.requires_grad() ? Tensor<T, B>::zeros(per_head) : Tensor<T, B>();
    Tensor<T, B> dk_heads = per_group && in.k.requires_grad() ? Tensor<T, B>::zeros(per_head) : Tensor<T, B>();
    const kernels::ScanGradients<T> grads{
        per_group ? (dq_heads.defined() ? dq_heads.data() : nullptr) : grad_of(in.q),
        per_group ? (dk_heads.defined() ? dk_heads.data() : nullptr) : grad_of(in.k),
        grad_of(in.v), grad_of(in.log_alpha), grad_of(in.gamma), grad_of(in.shift), grad_of(in.D)};
    Kernel::template backward<T>(p, docs, detail::scan_operands(in), dy.data(), states.data(), grads);
    const index_t heads_per_group = g.heads / g.groups, row = g.rank * g.d_state;
    if (dq_heads.defined())
      B::template reduce<T>(g.batch * g.seq * g.groups, heads_per_group, row, fn::Identity{}, T(1), T(1),
                            in.q.grad_buffer().data(), In<T>{dq_heads.data()});
    if (dk_heads.defined())
      B::template reduce<T>(g.batch * g.seq * g.groups, heads_per_group, row, fn::Identity{}, T(1), T(1),
                            in.k.grad_buffer().data(), In<T>{dk_heads.data()});
  }, operands);
}

}  // namespace megacpp
