// tests/cuda_emulation/conv1d_emulated.cpp: the launches of detail/ssm/conv1d_launch.cuh on the
// emulator, mirrored call for call (the launch header's <<<>>> is not host C++): the same kernels,
// grids and block sizes.
#include "conv1d_emulated.hpp"

#include "token_runs_emulated.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/causal_conv1d.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/ssm/conv1d.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

template <class T>
void emulated_conv1d_forward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids,
                             const kernels::Conv1dArgs<T>& a) {
  const index_t n = p.batch * p.seq * p.channels;
  if (n == 0) return;
  launch(cuda::conv1d_forward_kernel<T>, grid_stride_launch(n), p, doc_ids, a);
}

template <class T>
void emulated_conv1d_backward(const kernels::Conv1dParams& p, const std::int32_t* doc_ids,
                              const kernels::Conv1dArgs<T>& a, const kernels::Conv1dGrads<T>& g) {
  const index_t tokens = p.batch * p.seq, n = tokens * p.channels;
  if (n == 0) return;
  if (g.x) launch(cuda::conv1d_input_grad_kernel<T>, grid_stride_launch(n), p, doc_ids, a.weight, g.dy, g.x);
  if (g.weight)
    emulated_add_token_sums<T>(tokens, p.width * p.channels, cuda::Conv1dWeightGradTerm<T>{p, doc_ids, a.x, g.dy},
                               cuda::Conv1dWeightAt<T>{g.weight, p.channels, p.width});
  if (g.bias)
    emulated_add_token_sums<T>(tokens, p.channels, cuda::Conv1dBiasGradTerm<T>{p.channels, g.dy},
                               cuda::ColumnsAt<T>{g.bias});
}

template void emulated_conv1d_forward<float>(const kernels::Conv1dParams&, const std::int32_t*,
                                             const kernels::Conv1dArgs<float>&);
template void emulated_conv1d_forward<double>(const kernels::Conv1dParams&, const std::int32_t*,
                                              const kernels::Conv1dArgs<double>&);
template void emulated_conv1d_backward<float>(const kernels::Conv1dParams&, const std::int32_t*,
                                              const kernels::Conv1dArgs<float>&, const kernels::Conv1dGrads<float>&);
template void emulated_conv1d_backward<double>(const kernels::Conv1dParams&, const std::int32_t*,
                                               const kernels::Conv1dArgs<double>&, const kernels::Conv1dGrads<double>&);

}  // namespace megacpp::cuda_emulation
