// tests/cuda_emulation/m2rnn_emulated.cpp: M2RNNScan<Cuda>'s forward and backward
// (detail/m2rnn_scan_launch.cuh) on the emulator. Those launch with <<<>>>, which a host compiler
// does not take, so this file includes the kernel header alone and mirrors the launches: the same
// kernels, grids, block sizes, shared memory or global scratch, and buffers filled with NaN where
// the device allocation leaves them uninitialized (a value read before it is written shows in the
// outputs).
#include "m2rnn_emulated.hpp"

#include <limits>
#include <vector>

#include "emulator/launch.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/*.cuh do around their detail headers
#include "megacpp/backends/cuda/detail/m2rnn_scan.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {
namespace {

namespace m2rnn = megacpp::cuda::m2rnn;

template <class T>
std::vector<T> uninitialized(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

// The launch's shared memory and, when the scratch does not fit there, its global slices.
template <class T>
std::vector<T> global_scratch(const m2rnn::ScanScratch& s, unsigned blocks) {
  return uninitialized<T>(s.in_shared<T>() ? 0 : static_cast<std::size_t>(blocks) * static_cast<std::size_t>(s.size));
}

template <class T>
void forward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids, const kernels::M2RNNScanOperands<T>& in,
             T* y, T* checkpoints) {
  p.validate("emulated_m2rnn_forward");
  const m2rnn::ScanScratch s = m2rnn::ScanScratch::forward(p);
  const unsigned blocks = cuda::grid_per_item(p.batch * p.heads);
  std::vector<T> scratch = global_scratch<T>(s, blocks);
  const LaunchConfig config{dim3(blocks), dim3(m2rnn::kScanThreads), s.in_shared<T>() ? s.bytes<T>() : 0};
  launch(m2rnn::scan_forward_kernel<T>, config, p, s, doc_ids, in, y, checkpoints,
         s.in_shared<T>() ? nullptr : scratch.data());
}

template <class T>
void backward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids, const kernels::M2RNNScanOperands<T>& in,
              const T* dy, const T* checkpoints, const kernels::M2RNNScanGradients<T>& grads) {
  p.validate("emulated_m2rnn_backward");
  const m2rnn::ScanScratch s = m2rnn::ScanScratch::backward(p);
  const index_t items = p.batch * p.heads, VV = p.v_dim * p.v_dim;
  const unsigned blocks = cuda::grid_per_item(items);
  std::vector<T> scratch = global_scratch<T>(s, blocks);
  std::vector<T> chunk_states = uninitialized<T>(static_cast<std::size_t>(blocks * s.chunk_states));
  std::vector<T> dW_items = uninitialized<T>(grads.W ? static_cast<std::size_t>(items * VV) : 0);
  const LaunchConfig config{dim3(blocks), dim3(m2rnn::kScanThreads), s.in_shared<T>() ? s.bytes<T>() : 0};
  launch(m2rnn::scan_backward_kernel<T>, config, p, s, doc_ids, in, dy, checkpoints, grads,
         grads.W ? dW_items.data() : nullptr, chunk_states.data(), s.in_shared<T>() ? nullptr : scratch.data());
  if (!grads.W) return;
  const LaunchConfig sum{dim3(cuda::grid_for(p.heads * VV)), dim3(cuda::kThreads), 0};
  launch(m2rnn::sum_rows_kernel<T>, sum, p.batch, p.heads, VV, static_cast<const T*>(dW_items.data()), grads.W);
}

}  // namespace

void emulated_m2rnn_forward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                            const kernels::M2RNNScanOperands<float>& in, float* y, float* checkpoints) {
  forward(p, doc_ids, in, y, checkpoints);
}
void emulated_m2rnn_forward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                            const kernels::M2RNNScanOperands<double>& in, double* y, double* checkpoints) {
  forward(p, doc_ids, in, y, checkpoints);
}
void emulated_m2rnn_backward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                             const kernels::M2RNNScanOperands<float>& in, const float* dy, const float* checkpoints,
                             const kernels::M2RNNScanGradients<float>& grads) {
  backward(p, doc_ids, in, dy, checkpoints, grads);
}
void emulated_m2rnn_backward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                             const kernels::M2RNNScanOperands<double>& in, const double* dy, const double* checkpoints,
                             const kernels::M2RNNScanGradients<double>& grads) {
  backward(p, doc_ids, in, dy, checkpoints, grads);
}

}  // namespace megacpp::cuda_emulation
