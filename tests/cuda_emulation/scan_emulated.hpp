// tests/cuda_emulation/scan_emulated.hpp: the CUDA SSM scan (SsmScan<Cuda>: detail/ssm/scan*.cuh)
// run on the emulator, forward then backward, with host vectors as device memory.
#pragma once

#include <cstdint>
#include <vector>

#include "megacpp/core/kernels/ssm_scan.hpp"

namespace megacpp::cuda_emulation {

/// One scan call in host memory (layouts: megacpp/core/kernels/ssm_scan.hpp).
struct ScanProblem {
  kernels::ScanParams sizes;           // max_chunks: kernels::max_chunks_per_row of doc_ids
  std::vector<std::int32_t> doc_ids;   // (batch, seq): the layout's doc_ids_host
  std::vector<float> q, k;             // (batch, seq, groups, R, N)
  std::vector<float> v;                // (batch, seq, heads, R, P)
  std::vector<float> log_alpha, gamma; // (batch, seq, heads)
  std::vector<float> shift;            // (batch, seq, heads), or empty: Mamba-2 (no trapezoid)
  std::vector<float> D;                // (heads), or empty: no skip connection
  std::vector<float> dy;               // (batch, seq, heads, R, P): the gradient the backward takes
};

/// What a forward and its backward produce: y, the saved chunk states, and every gradient added
/// into its initial value (dshift and dD empty when the problem has no shift or D).
struct ScanRun {
  std::vector<float> y;             // (batch, seq, heads, R, P)
  std::vector<float> chunk_states;  // (batch, heads, max_chunks, N, P)
  std::vector<float> dq, dk;        // (batch, seq, heads, R, N): per head
  std::vector<float> dv;            // like v
  std::vector<float> dlog_alpha, dgamma, dshift;
  std::vector<float> dD;
};

/// The problem's operands (shift and D null when empty).
inline kernels::ScanOperands<float> scan_operands(const ScanProblem& p) {
  return {p.q.data(), p.k.data(), p.v.data(), p.log_alpha.data(), p.gamma.data(),
          p.shift.empty() ? nullptr : p.shift.data(), p.D.empty() ? nullptr : p.D.data()};
}

/// The run's gradients (null where empty).
inline kernels::ScanGradients<float> scan_gradients(ScanRun& r) {
  auto at = [](std::vector<float>& g) { return g.empty() ? nullptr : g.data(); };
  return {at(r.dq), at(r.dk), at(r.dv), at(r.dlog_alpha), at(r.dgamma), at(r.dshift), at(r.dD)};
}

/// SsmScan<Cuda>::forward then backward from p.dy and the forward's chunk states, every kernel
/// launched as detail/ssm/scan_launch.cuh launches it; the gradients are
/// added into `initial`'s (whose y and chunk_states are not read).
ScanRun run_emulated_scan(const ScanProblem& p, const ScanRun& initial);

}  // namespace megacpp::cuda_emulation
