// bench/m2rnn/m2rnn.cpp: the M2RNN mixer's throughput on the CPU.
//
// Configuration: M2RNN<float, Cpu> at the reference defaults (K 64, V 16, conv width 4) with
// d_model 512 (8 heads), batch 4 rows of 1024 tokens, 4 documents per row. Timed round-robin:
//   1. the layer's forward (tokens/s);
//   2. the layer's forward+backward from a fixed upstream gradient (tokens/s);
//   3. the recurrence op alone, forward (tokens/s): the sequential part, parallel over
//      (row, head) = 32 items.
// Ends with one JSON line (bench_common.hpp).
#include <cstdio>

#include "bench_common.hpp"
#include "megacpp/nn/m2rnn.hpp"

namespace {

using namespace megacpp;
using V = Var<float, Cpu>;
using Layer = M2RNN<float, Cpu>;

constexpr index_t kDModel = 512, kBatch = 4, kSeq = 1024;

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("m2rnn",
                           "M2RNN<float, Cpu>: d_model 512, 8 heads, K 64, V 16, conv 4; batch 4 x 1024 tokens, "
                           "4 documents per row; host recurrence kernel (OpenMP over row x head)",
                           args);
  Rng rng(1234);
  M2RNNConfig cfg;
  cfg.d_model = kDModel;
  Layer layer(cfg, rng);
  layer.out_proj.weight.var.mutable_value().assign(randn<float, Cpu>(layer.out_proj.weight.shape(), rng, 0.02));
  std::vector<Param<float, Cpu>*> params;
  layer.for_each_param([&](const std::string&, Param<float, Cpu>& p) { params.push_back(&p); });

  std::vector<std::vector<DocumentSpan>> spans(kBatch);
  for (auto& row : spans)
    for (index_t d = 0; d < 4; ++d) row.push_back({d * kSeq / 4, kSeq / 4});
  const auto docs = DocumentLayout<Cpu>::from_spans(kBatch, kSeq, spans);
  V u = V::parameter(randn<float, Cpu>({kBatch, kSeq, kDModel}, rng));
  const auto upstream = randn<float, Cpu>({kBatch, kSeq, kDModel}, rng, 1e-3);
  const index_t H = layer.heads(), K = cfg.k_head_dim, Vd = cfg.v_head_dim;
  const V q(randn<float, Cpu>({kBatch, kSeq, H, K}, rng, 0.3)), k(randn<float, Cpu>({kBatch, kSeq, H, K}, rng, 0.3));
  const V v(randn<float, Cpu>({kBatch, kSeq, H, Vd}, rng)), f(Tensor<float, Cpu>::full({kBatch, kSeq, H}, 0.9f));

  std::vector<bench::TimedCase> cases;
  cases.push_back({"layer fwd", [&] {
                     NoGrad no_grad;
                     V y = layer.forward(u, docs);
                   }});
  cases.push_back({"layer fwd+bwd", [&] {
                     V y = layer.forward(u, docs);
                     backward(y, upstream);
                   }, [&] {
                     for (auto* p : params) p->var.zero_grad();
                     u.zero_grad();
                   }});
  cases.push_back({"recurrence fwd", [&] {
                     NoGrad no_grad;
                     V y = m2rnn_recurrence(q, k, v, f, layer.state_weight.var, docs);
                   }});
  const auto t = bench::time_interleaved(cases, args.quick ? 0.05 : 1.0, args.quick ? 1 : 3);
  const double tokens = static_cast<double>(kBatch * kSeq);
  std::printf("  %-18s %10s %12s %5s\n", "case", "median ms", "tokens/s", "reps");
  for (std::size_t i = 0; i < cases.size(); ++i)
    std::printf("  %-18s %10.2f %12.0f %5d\n", cases[i].name.c_str(), t[i].median_s * 1e3, tokens / t[i].median_s, t[i].reps);

  bench::JsonLine json("m2rnn");
  json.add("layer_fwd_tokens_per_s", tokens / t[0].median_s, 0)
      .add("layer_fwd_bwd_tokens_per_s", tokens / t[1].median_s, 0)
      .add("recurrence_fwd_tokens_per_s", tokens / t[2].median_s, 0);
  json.print();
  return 0;
}
