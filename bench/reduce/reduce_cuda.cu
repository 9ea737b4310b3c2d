// bench/reduce/reduce_cuda.cu: the CUDA backend's sums over every row (detail/reduce.cuh), in two
// passes over chunks of rows (what Cuda::reduce and RMSNorm's backward launch) against one pass (the
// same kernel over the whole of the rows: the code before the split), in one run on one GPU.
//
// Shapes of the dense train step (bench/train_step: 4 rows of 4,096 tokens, d_model 512) and of the
// Mamba bench's layer (one row of 4,096):
//   1. a broadcast operand's gradient, sum_t gy[t, c] w[c] (Cuda::reduce, inner 512): 16,384 and
//      4,096 rows;
//   2. RMSNorm's gain gradient, sum_t gy[t, c] x[t, c] rstd[t] (Cuda::rmsnorm_backward, gx null);
//   3. sums of everything, sum_j x[j]^2 (inner 1): 16,384 elements (a loss) and 4M (a weight).
// Median of 50 after 5 warm-ups (CUDA events) of each; microseconds, the rows' bytes read per
// second, and the one-pass / two-pass time ratio. Prints "no CUDA device: bench skipped" without a
// GPU; ends with one JSON line.
#include <cstdio>
#include <string>

#include "cuda_bench.cuh"
#include "megacpp/core.hpp"

namespace {

using namespace megacpp;
namespace device = megacpp::cuda;  // the backend's kernels (not CCCL's ::cuda)
using Tens = Tensor<float, Cuda>;

constexpr int kWarmups = 5, kReps = 50;

struct Timing {
  double split_us = 0, one_pass_us = 0;
};

// Two passes (Cuda::reduce's choice) and the one-pass kernel over (outer 1, n, inner).
template <class F, class... Ins>
Timing time_reduce(index_t n, index_t inner, F f, float* out, Ins... ins) {
  Timing t;
  t.split_us = 1e3 * bench::median_ms([&] { Cuda::reduce<float>(1, n, inner, f, 1.0f, 1.0f, out, ins...); }, kWarmups, kReps);
  t.one_pass_us = 1e3 * bench::median_ms([&] {
    device::launch_reduce_pass<float>(1, n, inner, device::ReduceSplit{n, 1}, f, 1.0f, 1.0f, out, nullptr, ins...);
  }, kWarmups, kReps);
  return t;
}

// RMSNorm's gain gradient over (rows, cols): Cuda::rmsnorm_backward's two passes, and its kernel
// over the whole of the rows.
Timing time_rmsnorm_gain(index_t rows, index_t cols, const float* x, const float* rstd, const float* gy, float* ggain) {
  Timing t;
  t.split_us = 1e3 * bench::median_ms([&] {
    Cuda::rmsnorm_backward<float>(rows, cols, x, nullptr, rstd, gy, nullptr, ggain);
  }, kWarmups, kReps);
  t.one_pass_us = 1e3 * bench::median_ms([&] {
    const index_t col_blocks = device::reduce_col_blocks(cols);
    const dim3 block(device::kReduceCols, device::kReduceStripes);
    device::rmsnorm_backward_gain_kernel<float><<<device::grid_per_item(col_blocks), block, 0, device::kStream>>>(
        cols, device::ReduceSplit{rows, 1}, x, rstd, gy, ggain, nullptr);
    MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_backward_gain_kernel);
  }, kWarmups, kReps);
  return t;
}

void report(const char* what, index_t chunks, double bytes, const Timing& t) {
  std::printf("%-46s %3lld chunks: two passes %8.1f us (%6.0f GB/s), one pass %8.1f us (%6.0f GB/s): %5.2fx\n", what,
              static_cast<long long>(chunks), t.split_us, bytes / t.split_us * 1e-3, t.one_pass_us,
              bytes / t.one_pass_us * 1e-3, t.one_pass_us / t.split_us);
}

void add(bench::JsonLine& json, const std::string& key, const Timing& t) {
  json.add("cuda_us_" + key, t.split_us, 1);
  json.add("cuda_us_" + key + "_one_pass", t.one_pass_us, 1);
  json.add("cuda_speedup_" + key, t.one_pass_us / t.split_us);
}

}  // namespace

int main() {
  if (!bench::cuda_bench_start("reduce_cuda", "sums over every row, float in double: broadcast gradients (16384 and "
                                              "4096 rows of 512), RMSNorm's gain gradient (16384 x 512), sums of "
                                              "everything (16384 and 4M)"))
    return 0;
  Rng rng(1);
  constexpr index_t kTokens = 16384, kRow = 4096, kModel = 512, kWeight = index_t{1} << 22;
  const Tens x = randn<float, Cuda>({kTokens, kModel}, rng), gy = randn<float, Cuda>({kTokens, kModel}, rng);
  const Tens w = randn<float, Cuda>({kModel}, rng), rstd = randn<float, Cuda>({kTokens}, rng);
  const Tens big = randn<float, Cuda>({kWeight}, rng);
  Tens out = randn<float, Cuda>({kModel}, rng);
  const In<float> rows{gy.data()}, row{w.data(), true};
  const auto chunks = [](index_t n, index_t inner) { return device::reduce_split_for(1, n, inner).count; };

  bench::JsonLine json("reduce_cuda");
  const Timing bias = time_reduce(kTokens, kModel, fn::Mul{}, out.data(), rows, row);
  report("broadcast gradient, (16384, 512)", chunks(kTokens, kModel), 4.0 * kTokens * kModel, bias);
  add(json, "broadcast_grad_T16384_d512", bias);
  const Timing bias_row = time_reduce(kRow, kModel, fn::Mul{}, out.data(), rows, row);
  report("broadcast gradient, (4096, 512)", chunks(kRow, kModel), 4.0 * kRow * kModel, bias_row);
  add(json, "broadcast_grad_T4096_d512", bias_row);
  const Timing gain = time_rmsnorm_gain(kTokens, kModel, x.data(), rstd.data(), gy.data(), out.data());
  report("RMSNorm gain gradient, (16384, 512)", chunks(kTokens, kModel), 8.0 * kTokens * kModel, gain);
  add(json, "rmsnorm_gain_grad_T16384_d512", gain);
  const Timing loss = time_reduce(kTokens, 1, fn::Square{}, out.data(), rows);
  report("sum of everything, 16384", chunks(kTokens, 1), 4.0 * kTokens, loss);
  add(json, "sum_16384", loss);
  const Timing norm = time_reduce(kWeight, 1, fn::Square{}, out.data(), In<float>{big.data()});
  report("sum of everything, 4M", chunks(kWeight, 1), 4.0 * kWeight, norm);
  add(json, "sum_4M", norm);
  json.print();
  return 0;
}
