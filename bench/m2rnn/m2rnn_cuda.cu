// bench/m2rnn/m2rnn_cuda.cu: the M2RNN mixer on one GPU (the CUDA backend: M2RNNScan and
// CausalConv1d of backends/cuda/kernels/, cuBLAS for the projections).
//
// The configuration of bench/m2rnn/m2rnn.cpp: M2RNN<float, Cuda> at the reference defaults (K 64,
// V 16, conv width 4) with d_model 512 (8 heads), batch 4 rows of 1024 tokens, 4 documents per
// row. Median of 5 after one warm-up (CUDA events) of:
//   1. the layer's forward; 2. its forward+backward from a fixed upstream gradient;
//   3. the recurrence op alone, forward; 4. the recurrence forward+backward (M2RNNScan<Cuda>: one
//      block per (row, head) = 32 blocks, tokens in order).
// Prints "no CUDA device: bench skipped" without a GPU; ends with one JSON line.
#include <cstdio>
#include <vector>

#include "cuda_bench.cuh"
#include "megacpp/autograd/backward.hpp"
#include "megacpp/nn/m2rnn.hpp"

namespace {

using namespace megacpp;
using V = Var<float, Cuda>;
using Layer = M2RNN<float, Cuda>;

constexpr index_t kDModel = 512, kBatch = 4, kSeq = 1024;

}  // namespace

int main() {
  if (!bench::cuda_bench_start("m2rnn_cuda", "M2RNN<float, Cuda>: d_model 512, 8 heads, K 64, V 16, conv 4; batch 4 x "
                                             "1024 tokens, 4 documents per row; M2RNNScan<Cuda>"))
    return 0;
  Rng rng(1234);
  M2RNNConfig cfg;
  cfg.d_model = kDModel;
  Layer layer(cfg, rng);
  // out_proj starts at zero; give it values so the backward does its full work.
  layer.out_proj.weight.var.mutable_value().assign(randn<float, Cuda>(layer.out_proj.weight.shape(), rng, 0.02));
  std::vector<Param<float, Cuda>*> params;
  layer.for_each_param([&](const std::string&, Param<float, Cuda>& p) { params.push_back(&p); });

  std::vector<std::vector<DocumentSpan>> spans(kBatch);
  for (auto& row : spans)
    for (index_t d = 0; d < 4; ++d) row.push_back({d * kSeq / 4, kSeq / 4});
  const auto docs = DocumentLayout<Cuda>::from_spans(kBatch, kSeq, spans);
  V u = V::parameter(randn<float, Cuda>({kBatch, kSeq, kDModel}, rng));
  const auto upstream = randn<float, Cuda>({kBatch, kSeq, kDModel}, rng, 1e-3);
  const index_t H = layer.heads(), K = cfg.k_head_dim, Vd = cfg.v_head_dim;
  V q = V::parameter(randn<float, Cuda>({kBatch, kSeq, H, K}, rng, 0.3));
  V k = V::parameter(randn<float, Cuda>({kBatch, kSeq, H, K}, rng, 0.3));
  V v = V::parameter(randn<float, Cuda>({kBatch, kSeq, H, Vd}, rng));
  V f = V::parameter(Tensor<float, Cuda>::full({kBatch, kSeq, H}, 0.9f));
  const auto dy = randn<float, Cuda>({kBatch, kSeq, H, Vd}, rng, 1e-3);

  const double layer_fwd = bench::median_ms([&] {
    NoGrad no_grad;
    V y = layer.forward(u, docs);
  }, 1, 5);
  const double layer_step = bench::median_ms([&] {
    for (auto* p : params) p->var.zero_grad();
    u.zero_grad();
    V y = layer.forward(u, docs);
    backward(y, upstream);
  }, 1, 5);
  const double scan_fwd = bench::median_ms([&] {
    NoGrad no_grad;
    V y = m2rnn_recurrence(q, k, v, f, layer.state_weight.var, docs);
  }, 1, 5);
  const double scan_step = bench::median_ms([&] {
    for (V* x : {&q, &k, &v, &f}) x->zero_grad();
    layer.state_weight.var.zero_grad();
    V y = m2rnn_recurrence(q, k, v, f, layer.state_weight.var, docs);
    backward(y, dy);
  }, 1, 5);

  const double tokens = static_cast<double>(kBatch * kSeq);
  const auto per_s = [&](double ms) { return tokens / (ms * 1e-3); };
  std::printf("\n  %-22s %10s %12s\n", "case", "median ms", "tokens/s");
  std::printf("  %-22s %10.3f %12.0f\n", "layer fwd", layer_fwd, per_s(layer_fwd));
  std::printf("  %-22s %10.3f %12.0f\n", "layer fwd+bwd", layer_step, per_s(layer_step));
  std::printf("  %-22s %10.3f %12.0f\n", "recurrence fwd", scan_fwd, per_s(scan_fwd));
  std::printf("  %-22s %10.3f %12.0f\n", "recurrence fwd+bwd", scan_step, per_s(scan_step));
  bench::JsonLine json("m2rnn_cuda");
  json.add("device", std::string_view("cuda"))
      .add("cuda_layer_fwd_tokens_per_s", per_s(layer_fwd), 0)
      .add("cuda_layer_fwd_bwd_tokens_per_s", per_s(layer_step), 0)
      .add("cuda_recurrence_fwd_tokens_per_s", per_s(scan_fwd), 0)
      .add("cuda_recurrence_fwd_bwd_tokens_per_s", per_s(scan_step), 0);
  json.print();
  return 0;
}
