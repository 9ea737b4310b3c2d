// tests/cuda_emulation/decode_emulated.cpp: DecodeAttention<Cuda>::step (kernels/attention_decode.cuh),
// SsmStep<Cuda>::step (kernels/ssm_step.cuh) and M2RNNStep<Cuda>::step (kernels/m2rnn_step.cuh) on
// the emulator. Those functions launch with <<<>>>,
// which a host compiler does not take, so this file includes the kernel headers alone and mirrors
// the launches: the same kernels, grids, block sizes and shared memory, the attention's chunks of
// rows and its score scratch (filled with NaN, as the device allocation leaves it uninitialized: a
// score read before it is written shows in the outputs).
#include "decode_emulated.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "emulator/launch.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/*.cuh do around their detail headers
#include "megacpp/backends/cuda/detail/attention_decode.cuh"
#include "megacpp/backends/cuda/detail/m2rnn_step.cuh"
#include "megacpp/backends/cuda/detail/ssm/step.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {
namespace {

namespace decode = megacpp::cuda::decode;

template <class T>
void step(const kernels::AttentionDecodeParams& p, const kernels::AttentionDecodeArgs<T>& a) {
  const index_t chunk_rows = std::min(p.batch, decode::kRowsPerLaunch);
  std::vector<double> scores(static_cast<std::size_t>(chunk_rows * p.heads * p.slots),
                             std::numeric_limits<double>::quiet_NaN());
  for (index_t first = 0; first < p.batch; first += decode::kRowsPerLaunch) {
    const index_t count = std::min(decode::kRowsPerLaunch, p.batch - first);
    const LaunchConfig config{dim3(static_cast<unsigned>(p.heads), static_cast<unsigned>(count)),
                              dim3(decode::kDecodeThreads), 0};
    launch(decode::attention_decode_kernel<T>, config, p, first, decode::row_chunk(a.rows, first, count), a,
           scores.data());
  }
}

template <class T>
void ssm_step(const kernels::SsmStepParams& p, const kernels::SsmStepArgs<T>& a) {
  const LaunchConfig config{dim3(cuda::grid_per_item(p.batch * p.heads)), dim3(cuda::ssm::kStepThreads),
                            cuda::ssm::step_shared_bytes<T>(p)};
  launch(cuda::ssm::ssm_step_kernel<T>, config, p, a);
}

template <class T>
void m2rnn_step(const kernels::M2RNNStepParams& p, const kernels::M2RNNStepArgs<T>& a) {
  const LaunchConfig config{dim3(cuda::grid_per_item(p.batch * p.heads)), dim3(cuda::m2rnn::kM2RNNStepThreads),
                            cuda::m2rnn::step_shared_bytes<T>(p)};
  launch(cuda::m2rnn::m2rnn_step_kernel<T>, config, p, a);
}

}  // namespace

void emulated_decode_step(const kernels::AttentionDecodeParams& p, const kernels::AttentionDecodeArgs<float>& a) {
  step(p, a);
}
void emulated_decode_step(const kernels::AttentionDecodeParams& p, const kernels::AttentionDecodeArgs<double>& a) {
  step(p, a);
}

void emulated_ssm_step(const kernels::SsmStepParams& p, const kernels::SsmStepArgs<float>& a) { ssm_step(p, a); }
void emulated_ssm_step(const kernels::SsmStepParams& p, const kernels::SsmStepArgs<double>& a) { ssm_step(p, a); }

void emulated_m2rnn_step(const kernels::M2RNNStepParams& p, const kernels::M2RNNStepArgs<float>& a) { m2rnn_step(p, a); }
void emulated_m2rnn_step(const kernels::M2RNNStepParams& p, const kernels::M2RNNStepArgs<double>& a) {
  m2rnn_step(p, a);
}

}  // namespace megacpp::cuda_emulation
