/// \file
/// megacpp/backends/cpu/kernels.hpp: the CPU backend's implementations of every kernel contract
/// (megacpp/core/kernels/), each a specialisation that forwards to the kernel in
/// megacpp/backends/cpu/detail/. Included by <megacpp/backends/cpu.hpp>: including the backend
/// brings all of its kernels.
///
///   FusedAttention<Cpu>        detail/attention/{plan,tiles,forward,backward}.hpp
///   DecodeAttention<Cpu>       detail/attention/decode.hpp
///   SsmScan<Cpu>               detail/ssm/{common,forward,backward}.hpp, detail/small_gemm.hpp
///   SsmRotary<Cpu>             detail/ssm/rotary.hpp
///   SsmStep<Cpu>               detail/ssm/step.hpp
///   M2RNNScan<Cpu>             detail/m2rnn_scan.hpp
///   M2RNNStep<Cpu>             detail/m2rnn_step.hpp
///   CausalConv1d<Cpu>          detail/ssm/conv1d.hpp
///   SoftcapCrossEntropy<Cpu>   detail/indexing.hpp (cpu::softcap_cross_entropy)
///   GroupedGemm<Cpu>           detail/grouped_gemm.hpp
///   GatedCombine<Cpu>          detail/gated_combine.hpp
///   ExpertRouting<Cpu>         detail/expert_routing.hpp
#pragma once

#include "megacpp/backends/cpu.hpp"

#define MEGACPP_CPU_BACKEND_INTERNAL
#include "megacpp/backends/cpu/detail/attention/backward.hpp"
#include "megacpp/backends/cpu/detail/attention/decode.hpp"
#include "megacpp/backends/cpu/detail/attention/forward.hpp"
#include "megacpp/backends/cpu/detail/expert_routing.hpp"
#include "megacpp/backends/cpu/detail/gated_combine.hpp"
#include "megacpp/backends/cpu/detail/grouped_gemm.hpp"
#include "megacpp/backends/cpu/detail/m2rnn_scan.hpp"
#include "megacpp/backends/cpu/detail/m2rnn_step.hpp"
#include "megacpp/backends/cpu/detail/ssm/backward.hpp"
#include "megacpp/backends/cpu/detail/ssm/conv1d.hpp"
#include "megacpp/backends/cpu/detail/ssm/forward.hpp"
#include "megacpp/backends/cpu/detail/ssm/rotary.hpp"
#include "megacpp/backends/cpu/detail/ssm/step.hpp"
#undef MEGACPP_CPU_BACKEND_INTERNAL

#include "megacpp/core/kernels/registry.hpp"

namespace megacpp::kernels {

/// The CPU fused attention: FlashAttention-2 over per-document tiles, GQA groups together.
template <>
struct FusedAttention<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// o, lse from q, k, v; tiles per document, masked tiles skipped.
  template <class T>
  static AttentionStats forward(const AttentionParams& p, const DocumentLayout<Cpu>& docs,
                                const AttentionForwardArgs<T>& args) {
    return cpu::flash::forward<T>(p, docs, args);
  }
  /// Adds dq, dk, dv (each may be null) from the saved o, lse and the output gradient.
  template <class T>
  static AttentionStats backward(const AttentionParams& p, const DocumentLayout<Cpu>& docs,
                                 const AttentionBackwardArgs<T>& args) {
    return cpu::flash::backward<T>(p, docs, args);
  }
};

/// The CPU chunked scan: each (row, head) on one thread, chunks in order.
template <>
struct SsmScan<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// y and the states entering each chunk (chunk_states may be null when no backward follows).
  template <class T>
  static void forward(const ScanParams& p, const DocumentLayout<Cpu>& docs, const ScanOperands<T>& in, T* y,
                      T* chunk_states) {
    cpu::ssm::chunked_scan_forward<T>(p, docs.doc_ids.data(), in, y, chunk_states);
  }
  /// Adds into every gradient that is not null (q, k per head).
  template <class T>
  static void backward(const ScanParams& p, const DocumentLayout<Cpu>& docs, const ScanOperands<T>& in, const T* dy,
                       const T* chunk_states, const ScanGradients<T>& grads) {
    cpu::ssm::chunked_scan_backward<T>(p, docs.doc_ids.data(), in, dy, chunk_states, grads);
  }
};

/// The CPU rotary kernels of Mamba-3.
template <>
struct SsmRotary<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// cossin from angle and dt, theta restarting at every document.
  template <class T>
  static void angles_forward(const RotaryAnglesParams& p, const DocumentLayout<Cpu>& docs, const RotaryAnglesArgs<T>& a) {
    cpu::ssm::rotary_angles_forward<T>(p.batch, p.seq, p.heads, p.n_angles, docs.doc_ids.data(), a.angle, a.dt, a.cossin);
  }
  /// Adds dangle and ddt (either may be null).
  template <class T>
  static void angles_backward(const RotaryAnglesParams& p, const DocumentLayout<Cpu>& docs, const RotaryAnglesArgs<T>& a,
                              const RotaryAnglesGrads<T>& g) {
    cpu::ssm::rotary_angles_backward<T>(p.batch, p.seq, p.heads, p.n_angles, docs.doc_ids.data(), a.angle, a.dt,
                                        g.cossin, g.dcossin, g.angle, g.dt);
  }
  /// y = rotate(x + bias_h, cossin).
  template <class T>
  static void qk_forward(const RotaryQKParams& p, const RotaryQKArgs<T>& a) {
    cpu::ssm::rotary_qk_forward<T>(p.batch, p.seq, p.heads, p.rank, p.d_state, p.n_angles, a.x, a.bias, a.cossin, a.y);
  }
  /// Adds dx, dbias, dcossin (each may be null).
  template <class T>
  static void qk_backward(const RotaryQKParams& p, const RotaryQKArgs<T>& a, const RotaryQKGrads<T>& g) {
    cpu::ssm::rotary_qk_backward<T>(p.batch, p.seq, p.heads, p.rank, p.d_state, p.n_angles, a.x, a.bias, a.cossin,
                                    g.dy, g.x, g.bias, g.cossin);
  }
};

/// The CPU document-aware causal conv1d.
template <>
struct CausalConv1d<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// y from x, weight, bias; no tap crosses a document.
  template <class T>
  static void forward(const Conv1dParams& p, const DocumentLayout<Cpu>& docs, const Conv1dArgs<T>& a) {
    cpu::conv::causal_conv1d_forward<T>(p.batch, p.seq, p.channels, p.width, docs.doc_ids.data(), a.x, a.weight, a.bias,
                                        a.y);
  }
  /// Adds dx, dweight, dbias (each may be null).
  template <class T>
  static void backward(const Conv1dParams& p, const DocumentLayout<Cpu>& docs, const Conv1dArgs<T>& a,
                       const Conv1dGrads<T>& g) {
    cpu::conv::causal_conv1d_backward<T>(p.batch, p.seq, p.channels, p.width, docs.doc_ids.data(), a.x, a.weight, g.dy,
                                         g.x, g.weight, g.bias);
  }
};

/// The CPU fused head rows (softcap, log-sum-exp, loss and gradient while the row is in L1).
template <>
struct SoftcapCrossEntropy<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// zc, losses, lse and the gradient (when args.grad is not null), row by row.
  template <class T>
  static void forward(const SoftcapCrossEntropyParams& p, const SoftcapCrossEntropyArgs<T>& a) {
    cpu::softcap_cross_entropy<T>(p.rows, p.vocab, static_cast<T>(p.cap), a.logits, a.targets, a.mask,
                                  static_cast<T>(p.scale), a.losses, a.lse, a.grad);
  }
};

/// The CPU grouped expert GEMM: (group, tile) pieces of every group scheduled together.
template <>
struct GroupedGemm<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// y_g = x_g w_g^T for every group (Operand bf16: fp32 sums, through cpu::gemm_bf16).
  template <class T, class Operand = T>
  static void forward(const GroupedGemmParams& p, const GroupedGemmArgs<T, Operand>& a) {
    cpu::grouped::forward<T, Operand>(p, a.x, a.w, a.y);
  }
  /// dx_g += dy_g w_g, dw_g += dy_g^T x_g (either may be null).
  template <class T, class Operand = T>
  static void backward(const GroupedGemmParams& p, const GroupedGemmArgs<T, Operand>& a,
                       const GroupedGemmGrads<T, Operand>& g) {
    if (g.dx) cpu::grouped::backward_input<T, Operand>(p, g.dy, a.w, g.dx);
    if (g.dw) cpu::grouped::backward_weight<T, Operand>(p, g.dy, a.x, g.dw);
  }
};

/// The CPU decode-step attention: one thread per (row, head), keys oldest first, in double.
template <>
struct DecodeAttention<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// Writes each row's new key and value into its cache slot, then o.
  template <class T>
  static void step(const AttentionDecodeParams& p, const AttentionDecodeArgs<T>& a) {
    cpu::decode::attention_step<T>(p, a);
  }
};

/// The CPU Mamba-3 (and Mamba-2) decode step: one thread per (row, head), columns in order.
template <>
struct SsmStep<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// Advances every row's angles, state and previous-token buffers by one token; writes y.
  template <class T>
  static void step(const SsmStepParams& p, const SsmStepArgs<T>& a) {
    cpu::ssm::decode_step<T>(p, a);
  }
};

/// The CPU M2RNN training recurrence: one thread per (row, head), tokens in order.
template <>
struct M2RNNScan<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// y and, when checkpoints is not null, the state entering every chunk.
  template <class T>
  static void forward(const M2RNNScanParams& p, const DocumentLayout<Cpu>& docs, const M2RNNScanOperands<T>& in, T* y,
                      T* checkpoints) {
    cpu::m2rnn::scan_forward<T>(p, docs.doc_ids.data(), in, y, checkpoints);
  }
  /// Adds into every gradient that is not null, from dy and the forward's checkpoints.
  template <class T>
  static void backward(const M2RNNScanParams& p, const DocumentLayout<Cpu>& docs, const M2RNNScanOperands<T>& in,
                       const T* dy, const T* checkpoints, const M2RNNScanGradients<T>& grads) {
    cpu::m2rnn::scan_backward<T>(p, docs.doc_ids.data(), in, dy, checkpoints, grads);
  }
};

/// The CPU M2RNN decode step: one thread per (row, head), the state's rows in order.
template <>
struct M2RNNStep<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// Advances every row's state by one token; writes y.
  template <class T>
  static void step(const M2RNNStepParams& p, const M2RNNStepArgs<T>& a) {
    cpu::m2rnn::decode_step<T>(p, a);
  }
};

/// The CPU gated combine: threads own whole tokens, slots in order.
template <>
struct GatedCombine<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// y[t] = sum_j gate[t, j] ys[row_of_slot[j, t]].
  template <class T>
  static void forward(const GatedCombineParams& p, const GatedCombineArgs<T>& a) {
    cpu::moe::gated_combine_forward<T>(p, a);
  }
  /// dys[row] += gate dy[t], dgate[t, j] += dy[t] . ys[row] (either may be null).
  template <class T>
  static void backward(const GatedCombineParams& p, const GatedCombineArgs<T>& a, const GatedCombineGrads<T>& g) {
    cpu::moe::gated_combine_backward<T>(p, a, g);
  }
};

/// The CPU expert routing: threads own whole tokens for the choice, one stable counting sort.
template <>
struct ExpertRouting<Cpu> {
  static constexpr bool available = true;  ///< implemented
  /// Selects each token's k experts and sorts the pairs by expert; the first non-finite score, if any.
  template <class T>
  static RoutingFault route(const ExpertRoutingParams& p, const ExpertRoutingArgs<T>& a) {
    return cpu::moe::route_experts<T>(p, a);
  }
};

}  // namespace megacpp::kernels

namespace megacpp {
static_assert(kernels::AllKernels::all_implemented_by<Cpu>(),
              "megacpp_cpu_backend_implements_every_kernel: the CPU backend is the reference and must implement every "
              "contract in megacpp/core/kernels/registry.hpp");
}  // namespace megacpp
