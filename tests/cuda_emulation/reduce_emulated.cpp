// tests/cuda_emulation/reduce_emulated.cpp: the launches of detail/reduce_launch.cuh on the
// emulator, mirrored call for call (the launch header's <<<>>> is not host C++): the same kernels,
// grids, block sizes and chunk partials (filled with NaN, as the device allocation leaves them
// uninitialized).
#include "reduce_emulated.hpp"

#include "reduce_pass_emulated.hpp"

namespace megacpp::cuda_emulation {

// Mirrors cuda::reduce.
template <class T, class F, class... Ins>
void emulated_reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
  if (outer == 0 || inner == 0) return;
  const cuda::ReduceSplit split = cuda::reduce_split_for(outer, n, inner);
  emulated_reduce_in_passes<T>(outer, inner, split, scale, beta, out, [&](double* partials) {
    emulated_reduce_pass<T>(outer, n, inner, split, f, scale, beta, out, partials, ins...);
  });
}

index_t reduce_chunks(index_t outer, index_t n, index_t inner) { return cuda::reduce_split_for(outer, n, inner).count; }

template void emulated_reduce<float, fn::Mul, In<float>, In<float>>(index_t, index_t, index_t, fn::Mul, float, float,
                                                                    float*, In<float>, In<float>);
template void emulated_reduce<double, fn::Mul, In<double>, In<double>>(index_t, index_t, index_t, fn::Mul, double,
                                                                       double, double*, In<double>, In<double>);
template void emulated_reduce<float, fn::Square, In<float>>(index_t, index_t, index_t, fn::Square, float, float, float*,
                                                            In<float>);
template void emulated_reduce<double, fn::Square, In<double>>(index_t, index_t, index_t, fn::Square, double, double,
                                                              double*, In<double>);

}  // namespace megacpp::cuda_emulation
