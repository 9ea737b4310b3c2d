// megacpp/nn/mamba/scan_inputs.hpp: the operands of an SSM scan and their shape contract.
//
// One scan serves Mamba-3 (SISO, MIMO) and Mamba-2; per (row, head), U_t = sum_r v_{t,r} k_{t,r}^T:
//   H_t = exp(log_alpha_t) (H_{t-1} + shift_t U_{t-1}) + gamma_t U_t,   y_{t,r} = H_t q_{t,r} + D v_{t,r}
// with H and U_{t-1} zero at the first token of every document. Mamba-3: log_alpha = A dt,
// gamma = lambda dt, shift = (1 - lambda) dt. Mamba-2: log_alpha = A dt, gamma = dt, no shift.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "megacpp/autograd/var.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/ssm_scan.hpp"

namespace megacpp {

/// The operands of chunked_scan / sequential_scan.
template <class T, Backend B>
struct ScanInputs {
  Var<T, B> q;          ///< (batch, seq, groups, R, N): C in SSM notation (query)
  Var<T, B> k;          ///< (batch, seq, groups, R, N): B in SSM notation (key); head h reads group h / (heads / groups)
  Var<T, B> v;          ///< (batch, seq, heads, R, P): x (value)
  Var<T, B> log_alpha;  ///< (batch, seq, heads): A dt (<= 0 in the layers)
  Var<T, B> gamma;      ///< (batch, seq, heads): weight of the current token's input
  Var<T, B> shift;      ///< (batch, seq, heads) or undefined: Mamba-3's trapezoid weight of the previous token's input
  Var<T, B> D;          ///< (heads) or undefined: skip connection y += D v
};

/// Sizes of a scan, read off its operands.
struct ScanGeometry {
  index_t batch = 0, seq = 0, heads = 0, groups = 0, rank = 0, d_state = 0, head_dim = 0;
};

namespace detail {

// Validates every operand against q and v and the document layout; throws megacpp::Error naming
// the operand, its shape and the expected one.
template <class T, Backend B>
ScanGeometry check_scan_inputs(const char* op, const ScanInputs<T, B>& in, const DocumentLayout<B>& docs) {
  check(in.q.defined() && in.k.defined() && in.v.defined() && in.log_alpha.defined() && in.gamma.defined(), op,
        "q, k, v, log_alpha and gamma are required");
  check(in.q.rank() == 5, op, "q must be (batch, seq, groups, rank, d_state), got ", in.q.shape());
  check(in.v.rank() == 5, op, "v must be (batch, seq, heads, rank, head_dim), got ", in.v.shape());
  ScanGeometry g;
  g.batch = in.q.shape()[0];
  g.seq = in.q.shape()[1];
  g.groups = in.q.shape()[2];
  g.rank = in.q.shape()[3];
  g.d_state = in.q.shape()[4];
  g.heads = in.v.shape()[2];
  g.head_dim = in.v.shape()[4];
  check(g.batch > 0 && g.seq > 0 && g.groups > 0 && g.rank > 0 && g.d_state > 0 && g.head_dim > 0, op,
        "empty dimension in q ", in.q.shape(), " or v ", in.v.shape());
  check(g.heads % g.groups == 0, op, "heads (", g.heads, ") must be a multiple of groups (", g.groups, "): v ",
        in.v.shape(), ", q ", in.q.shape());
  check(in.k.shape() == in.q.shape(), op, "k ", in.k.shape(), " must have q's shape ", in.q.shape());
  const Shape v_expected{g.batch, g.seq, g.heads, g.rank, g.head_dim};
  check(in.v.shape() == v_expected, op, "v ", in.v.shape(), " must be ", v_expected, " for q ", in.q.shape());
  const Shape per_head{g.batch, g.seq, g.heads};
  check(in.log_alpha.shape() == per_head, op, "log_alpha ", in.log_alpha.shape(), " must be ", per_head);
  check(in.gamma.shape() == per_head, op, "gamma ", in.gamma.shape(), " must be ", per_head);
  if (in.shift.defined()) check(in.shift.shape() == per_head, op, "shift ", in.shift.shape(), " must be ", per_head);
  if (in.D.defined()) check(in.D.shape() == Shape{g.heads}, op, "D ", in.D.shape(), " must be (", g.heads, ")");
  check(docs.batch == g.batch && docs.seq == g.seq &&
            docs.doc_ids_host.size() == static_cast<std::size_t>(g.batch * g.seq),
        op, "document layout (", docs.batch, ", ", docs.seq, ") does not match (batch, seq) = (", g.batch, ", ",
        g.seq, ")");
  return g;
}

// The operands' data as the SsmScan contract takes them (shift and D null when undefined).
template <class T, Backend B>
kernels::ScanOperands<T> scan_operands(const ScanInputs<T, B>& in) {
  return {in.q.value().data(),         in.k.value().data(),
          in.v.value().data(),         in.log_alpha.value().data(),
          in.gamma.value().data(),     in.shift.defined() ? in.shift.value().data() : nullptr,
          in.D.defined() ? in.D.value().data() : nullptr};
}

}  // namespace detail

}  // namespace megacpp
