// bench_train_step: one full training step (forward, backward, AdamW) of the dense reference
// model, of the dense model with multi-token prediction of depth 1 (lambda 0.3, nn/model/mtp.hpp),
// of an "AAM" hybrid and of an "AEM" MoE hybrid of the same width: tokens/s, MFU and the MTP
// step's overhead, at 4 layers and at 12.
//
// Configuration: V = 8192, d = 512, 4 layers, 8 heads / 2 kv heads, T = 1024, B = 4,
// 8 documents per row (BOS every 128 tokens), fp32. MFU = model FLOPs per second / the
// Cpu::gemm rate measured in the same run (2048^3), model FLOPs = 6 x (matrix parameters incl.
// the tied head) per token + 6 x the attention products actually computed (QK^T and PV, causal
// within documents): the useful work of a step, not what the kernels happen to execute. MTP adds
// its W_p and block matrices, a second pass through the tied head and one attention layer.
// The dense and "AAM" models run again with Bf16Mixed (bf16 product operands, fp32 sums and
// everything else fp32: autograd/precision.hpp), timed round-robin with their fp32 twins; their
// MFU is against the bf16 dot-product peak (VDPBF16PS, measured like the FMA peak) of the path
// that ran, or the FMA peak on the fp32 fallback. Step peak memory: the most bytes one step adds
// to what was live before it (Cpu::memory_stats(): activations, gradients and temporaries; the
// weights and AdamW state are the same in both precisions), printed per model.
// Gradient accumulation in bf16: the dense bf16 step again as 4 micro-batches of 1 row. Each
// weight's bf16 copy is cast once per optimizer step (Var::value_as_bf16 keeps it until a writer
// changes the weight); the same step with the copies dropped before every micro-batch (a cast
// per micro-batch, as before the cache) is timed beside it, and the bench counts how many weight
// copies the later micro-batches had to remake (0 when the cache holds).
// The bf16 copies written by the optimizer: AdamW's pass writes each weight's bf16 rounding with the
// weight (Var::update_value), so the next forward casts nothing; the dense bf16 step is timed beside
// the same step with the copies dropped after each optimizer step (a cast of every weight per step,
// as before).
// The whole MLP as one op under bf16 products (relu2_mlp_bf16): its forward+backward at the dense
// model's shape against fc's product then relu2_linear_bf16, timed round-robin.
#include <chrono>
#include <cstdio>
#include <utility>

#include "bench_common.hpp"
#include "mlp_fusion.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"

using namespace megacpp;

namespace {
inline constexpr Dims kBenchDims{.d_model = 512, .n_layers = 4, .vocab = 8192, .max_seq = 4096};
inline constexpr AttentionSizes kBenchAttention{.n_heads = 8, .n_kv_heads = 2};
inline constexpr MambaSizes kBenchMamba{.d_state = 128, .headdim = 64, .expand = 2};
using DenseModel = RecipeLM<float, Cpu, kBenchDims, "A", kBenchAttention, kBenchMamba>;
using HybridModel = RecipeLM<float, Cpu, kBenchDims, "AAM", kBenchAttention, kBenchMamba>;
using DenseBf16Model = DenseModel::with_precision<Bf16Mixed>;
using HybridBf16Model = HybridModel::with_precision<Bf16Mixed>;
using MtpModel = LM<float, Cpu, kBenchDims, Pattern<"A">, RecipeLetters<kBenchAttention, kBenchMamba>, HeadSoftcap<30>,
                    MtpDepth1<'A'>>;
// The MTP overhead at a deeper trunk (12 layers, same width and vocabulary): at 4 layers the MTP
// module (W_p, one block, a second pass through the 8192-word head) is +48.7% of the useful
// FLOPs, which no implementation can hide; at 12 layers it is +19.8%, about the share the recipe's
// production run reported (19%).
inline constexpr Dims kDeepDims{.d_model = 512, .n_layers = 12, .vocab = 8192, .max_seq = 4096};
using DeepDenseModel = RecipeLM<float, Cpu, kDeepDims, "A", kBenchAttention, kBenchMamba>;
using DeepMtpModel = LM<float, Cpu, kDeepDims, Pattern<"A">, RecipeLetters<kBenchAttention, kBenchMamba>, HeadSoftcap<30>,
                        MtpDepth1<'A'>>;
// "AEM": attention, an MoE feed-forward layer (8 experts of 4 d / 2, top-2, balance loss), Mamba-3.
inline constexpr MoESizes kBenchMoE{};
using MoEModel = RecipeMoELM<float, Cpu, kBenchDims, "AEM", kBenchAttention, kBenchMamba, kBenchMoE>;
constexpr index_t kBatch = 4, kSeq = 1024, kDocLen = 128;
constexpr std::int32_t kBos = 0;

double gemm_gflops(const bench::BenchArgs& args) {
  const index_t n = 2048;
  Rng rng(1);
  const auto a = randn<float, Cpu>({n, n}, rng), b = randn<float, Cpu>({n, n}, rng);
  CpuTensor<float> c(Shape{n, n});
  const GemmArgs g = GemmArgs::dense(false, false, n, n, n);
  const auto t = bench::time_interleaved({{"gemm", [&] { Cpu::gemm<float>(g, 1.0f, a.data(), b.data(), 0.0f, c.data()); }}},
                                         args.quick ? 0.3 : 2.0, 3);
  return 2.0 * n * n * n / t[0].median_s * 1e-9;
}

struct StepFigures {
  double seconds = 0, tokens_per_s = 0, model_gflop = 0, loss = 0;
  // most bytes a step adds to what was live before it (activations, gradients, temporaries;
  // not the weights and optimizer state, nor the other model of a timed pair)
  double step_peak_mib = 0;
};

// One packed micro-batch: `rows` rows of the bench's token stream from row `first`.
template <class Model>
struct MicroBatch {
  DocumentLayout<Cpu> docs;
  CpuTensor<std::int32_t> in, tg;
  CpuTensor<float> mask;
  MicroBatch(const std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& targets, index_t first, index_t rows)
      : mask(CpuTensor<float>::full({rows, kSeq}, 1.0f)) {
    const auto from = static_cast<std::ptrdiff_t>(first * kSeq), to = static_cast<std::ptrdiff_t>((first + rows) * kSeq);
    const std::vector<std::int32_t> i(ids.begin() + from, ids.begin() + to), t(targets.begin() + from, targets.begin() + to);
    docs = Model::documents(i, rows, kSeq, kBos);
    in = CpuTensor<std::int32_t>::from_host({rows, kSeq}, i);
    tg = CpuTensor<std::int32_t>::from_host({rows, kSeq}, t);
  }
};

// One model's training step on a fixed packed batch (AdamW on every parameter), as one
// micro-batch of kBatch rows or as kBatch micro-batches of one row (losses scaled by 1/kBatch).
template <class Model>
struct StepBench {
  Model model{0};
  std::vector<optim::ParamRef<float, Cpu>> params = optim::collect_params<float, Cpu>(model);
  optim::AdamW<float, Cpu> opt{params, optim::AdamWOptions{.lr = 1e-3}};
  std::vector<std::int32_t> ids, targets;
  std::vector<MicroBatch<Model>> micro;
  // accumulation only: drop every weight's bf16 copy before each micro-batch (a cast per micro-batch)
  bool recast_per_micro_batch = false;
  // drop every weight's bf16 copy after the optimizer step (the next forward casts each weight again)
  bool recast_after_step = false;
  std::size_t recast_copies = 0;  // weight copies a later micro-batch had to remake, over all steps
  double loss = 0;

  explicit StepBench(bool accumulate = false) : ids(static_cast<std::size_t>(kBatch * kSeq)), targets(ids.size()) {
    std::fputs(model.summary().c_str(), stdout);
    Rng rng(2);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = i % kDocLen == 0 ? kBos : static_cast<std::int32_t>(1 + rng.below(kBenchDims.vocab - 1));
      targets[i] = static_cast<std::int32_t>(1 + rng.below(kBenchDims.vocab - 1));
    }
    if (accumulate)
      for (index_t b = 0; b < kBatch; ++b) micro.emplace_back(ids, targets, b, 1);
    else
      micro.emplace_back(ids, targets, 0, kBatch);
  }
  void step() {
    std::vector<Tensor<bf16, Cpu>> first_copies;
    loss = 0;
    for (std::size_t m = 0; m < micro.size(); ++m) {
      if (recast_per_micro_batch)
        for (auto& p : params) p.var.mutable_value();  // drops the copy
      const MicroBatch<Model>& mb = micro[m];
      const auto l = model.loss(mb.in, mb.tg, mb.mask, mb.docs);
      loss += l.item() / static_cast<double>(micro.size());
      backward(micro.size() > 1 ? scale(l, 1.0 / static_cast<double>(micro.size())) : l);
      if constexpr (std::is_same_v<typename Model::precision_type, Bf16Mixed>) {
        if (micro.size() == 1) continue;
        // the copies the first micro-batch's products made, and whether the next ones reused them
        for (std::size_t i = 0, matrix = 0; i < params.size(); ++i) {
          if (params[i].shape().rank() != 2) continue;
          if (m == 0) first_copies.push_back(params[i].var.value_as_bf16());
          else recast_copies += !params[i].var.value_as_bf16().same_data(first_copies[matrix]);
          ++matrix;
        }
      }
    }
    opt.step();
    opt.zero_grad();
    if (recast_after_step)
      for (auto& p : params) p.var.mutable_value();
  }
  // Useful FLOPs: 6 x matrix params (the embedding counts once, as the head's GEMM) per token,
  // plus attention: per attention layer and token, 2 products x 2 FLOPs x heads x head_dim x
  // (keys attended = position in document + 1, mean (kDocLen + 1) / 2), times 3 for training.
  StepFigures figures(double seconds, const char* name) {
    StepFigures f;
    Cpu::reset_peak_memory();
    const std::size_t live_before = Cpu::memory_stats().current_bytes;
    step();  // one more step, untimed, for its peak memory
    f.step_peak_mib = static_cast<double>(Cpu::memory_stats().peak_bytes - live_before) / (1 << 20);
    f.seconds = seconds;
    f.loss = loss;
    f.tokens_per_s = static_cast<double>(kBatch * kSeq) / f.seconds;
    index_t matrix_params = 0;
    model.for_each_param([&](const std::string& n, Param<float, Cpu>& p) {
      // an MoE expert's matrix does work for top_k / experts of the tokens
      const bool expert = n.find(".experts.") != std::string::npos;
      if (p.shape().rank() == 2) matrix_params += expert ? p.numel() * kBenchMoE.top_k / kBenchMoE.experts : p.numel();
    });
    index_t attention_layers = 0;
    for (index_t l = 0; l < Model::dims.n_layers; ++l) attention_layers += Model::pattern()[l % std::char_traits<char>::length(Model::pattern())] == 'A';
    if constexpr (Model::has_mtp) {
      matrix_params += model.embedding.numel();  // the tied head runs twice
      attention_layers += 1;
    }
    const double attn_per_token = 3.0 * 2 * 2 * kBenchAttention.n_heads * kBenchAttention.head_dim_for(kBenchDims.d_model) * (kDocLen + 1) / 2.0;
    f.model_gflop = (6.0 * static_cast<double>(matrix_params) + attention_layers * attn_per_token) * kBatch * kSeq * 1e-9;
    std::printf("%-7s step %.1f ms, %.0f tokens/s, %.1f GFLOP/step useful, %.1f GFLOP/s, loss %.4f, step peak +%.0f MiB\n\n",
                name, f.seconds * 1e3, f.tokens_per_s, f.model_gflop, f.model_gflop / f.seconds, f.loss, f.step_peak_mib);
    return f;
  }
};

// Two prepared steps timed round-robin, so the ratio of their times sees one machine state: their
// median seconds per step.
template <class First, class Second>
std::pair<double, double> round_robin_seconds(const bench::BenchArgs& args, First& first, const char* first_name,
                                              Second& second, const char* second_name) {
  const auto t = bench::time_interleaved({{first_name, [&] { first.step(); }}, {second_name, [&] { second.step(); }}},
                                         args.quick ? 0.5 : 8.0, args.quick ? 1 : 3);
  return {t[0].median_s, t[1].median_s};
}

// Two models' steps timed round-robin.
template <class First, class Second>
std::pair<StepFigures, StepFigures> time_pair(const bench::BenchArgs& args, const char* first_name, const char* second_name) {
  StepBench<First> first;
  StepBench<Second> second;
  const auto [first_s, second_s] = round_robin_seconds(args, first, first_name, second, second_name);
  return {first.figures(first_s, first_name), second.figures(second_s, second_name)};
}

// The bf16 dense step as kBatch micro-batches of one row: weights cast once per step (the cache)
// against a cast per micro-batch, timed round-robin; and the copies the cache holds between steps.
struct AccumulationFigures {
  StepFigures cached, recast;
  std::size_t recast_copies = 0;  // remade by later micro-batches under the cache: 0 when it holds
  double copies_mib = 0;          // the bf16 weight copies held between steps
  double cast_ms = 0;             // one cast of every weight matrix: what each saved cast saves
};
AccumulationFigures time_accumulation(const bench::BenchArgs& args) {
  StepBench<DenseBf16Model> cached(true), recast(true);
  recast.recast_per_micro_batch = true;
  const auto [cached_s, recast_s] = round_robin_seconds(args, cached, "dense-bf16-accum4", recast, "dense-bf16-accum4-recast");
  AccumulationFigures f;
  f.recast_copies = cached.recast_copies;
  for (const auto& p : cached.params)
    if (p.shape().rank() == 2) f.copies_mib += static_cast<double>(p.var.numel() * sizeof(bf16)) / (1 << 20);
  const auto cast = bench::time_interleaved({{"cast", [&] {
                                                for (const auto& p : cached.params)
                                                  if (p.shape().rank() == 2) (void)p.var.value().template to<bf16>();
                                              }}},
                                            args.quick ? 0.2 : 1.0, 3);
  f.cast_ms = cast[0].median_s * 1e3;
  f.cached = cached.figures(cached_s, "dense-bf16-accum4");
  f.recast = recast.figures(recast_s, "dense-bf16-accum4-recast");
  return f;
}

// The bf16 dense step with AdamW writing the weights' bf16 copies against the same step casting them
// again before each forward, timed round-robin; and whether the copies are current after a step.
struct RoundingFigures {
  StepFigures in_update, cast_per_step;
  std::size_t stale_after_step = 0;  // weight copies the optimizer step left stale: 0 expected
};
RoundingFigures time_rounding_in_update(const bench::BenchArgs& args) {
  StepBench<DenseBf16Model> in_update, cast_per_step;
  cast_per_step.recast_after_step = true;
  const auto [in_update_s, cast_s] = round_robin_seconds(args, in_update, "dense-bf16", cast_per_step, "dense-bf16-cast-per-step");
  RoundingFigures f;
  for (const auto& p : in_update.params)
    if (p.shape().rank() == 2) f.stale_after_step += !p.var.bf16_copy_current();
  f.in_update = in_update.figures(in_update_s, "dense-bf16");
  f.cast_per_step = cast_per_step.figures(cast_s, "dense-bf16-cast-per-step");
  return f;
}

// The dense model's MLP (mlp_fusion.hpp: 4096 tokens, d 512, hidden 2048) under bf16 products as
// one op and as fc's product followed by relu2_linear_bf16, timed round-robin: milliseconds per
// forward+backward, fused then apart.
std::pair<double, double> time_mlp_fusion(const bench::BenchArgs& args) {
  bench::MlpFusionProblem<Cpu> mlp(kBatch, kSeq, kBenchDims.d_model);
  const auto t = bench::time_interleaved({{"mlp-bf16-fused", [&] { mlp.pass(true); }}, {"mlp-bf16-apart", [&] { mlp.pass(false); }}},
                                         args.quick ? 0.3 : 3.0, 3);
  return {t[0].median_s * 1e3, t[1].median_s * 1e3};
}

template <class Model>
StepFigures time_steps(const bench::BenchArgs& args, const char* name) {
  StepBench<Model> b;
  const auto t = bench::time_interleaved({{name, [&] { b.step(); }}}, args.quick ? 0.5 : 8.0, args.quick ? 1 : 3);
  return b.figures(t[0].median_s, name);
}
}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("train_step",
                           "fp32 and bf16 mixed (Bf16Mixed), V 8192, d 512, 4 layers, 8/2 heads, T 1024, B 4, 8 documents per row, AdamW; "
                           "dense pattern \"A\", dense + MTP depth 1 (lambda 0.3), hybrid \"AAM\" and MoE hybrid "
                           "\"AEM\" (8 experts, top-2); dense and dense + MTP again at 12 layers",
                           args);
  const double gemm = gemm_gflops(args);
  std::printf("Cpu::gemm 2048^3: %.1f GFLOP/s (the MFU denominator)\n\n", gemm);
  // dense and dense + MTP (at 4 and 12 layers), and each model in fp32 and bf16 mixed precision,
  // timed in pairs
  const auto [dense, mtp] = time_pair<DenseModel, MtpModel>(args, "dense", "mtp");
  const auto [deep, deep_mtp] = time_pair<DeepDenseModel, DeepMtpModel>(args, "dense-12", "mtp-12");
  const StepFigures moe = time_steps<MoEModel>(args, "aem-moe");
  const auto [hybrid, hybrid16] = time_pair<HybridModel, HybridBf16Model>(args, "aam", "aam-bf16");
  const auto [dense32, dense16] = time_pair<DenseModel, DenseBf16Model>(args, "dense", "dense-bf16");
  const AccumulationFigures accum = time_accumulation(args);
  const RoundingFigures rounding = time_rounding_in_update(args);
  const auto [mlp_fused_ms, mlp_apart_ms] = time_mlp_fusion(args);
  const double bf16_peak = bench::bf16_dot_peak_gflops();
  const double fma_peak = bench::fma_peak_gflops();
  const double bf16_denominator = bf16_peak > 0 ? bf16_peak : fma_peak;  // the fallback multiplies in fp32
  const double mfu16 = dense16.model_gflop / dense16.seconds / bf16_denominator;
  std::printf("bf16 GEMM path %.*s; bf16 dot peak %.1f GFLOP/s, FMA peak %.1f GFLOP/s (measured now)\n",
              static_cast<int>(cpu::bf16_gemm_path_name(cpu::bf16_gemm_path()).size()),
              cpu::bf16_gemm_path_name(cpu::bf16_gemm_path()).data(), bf16_peak, fma_peak);
  std::printf("dense bf16: %.0f tokens/s = %.2fx the fp32 step timed beside it (target >= 1.6), MFU %.2f of the bf16 "
              "peak; aam bf16: %.0f tokens/s = %.2fx its fp32 step\n",
              dense16.tokens_per_s, dense32.seconds / dense16.seconds, mfu16, hybrid16.tokens_per_s,
              hybrid.seconds / hybrid16.seconds);
  std::printf("dense bf16, %lld micro-batches of 1 row: %.0f tokens/s with each weight cast once per step (%zu copies "
              "remade by later micro-batches; %.1f MiB of bf16 copies held between steps), %.0f tokens/s casting per "
              "micro-batch: %.3fx; one cast of every weight takes %.2f ms\n",
              static_cast<long long>(kBatch), accum.cached.tokens_per_s, accum.recast_copies, accum.copies_mib,
              accum.recast.tokens_per_s, accum.recast.seconds / accum.cached.seconds, accum.cast_ms);
  std::printf("dense bf16 with AdamW writing the weights' bf16 copies: %.0f tokens/s (%zu weight copies stale after the "
              "step); casting every weight again each step: %.0f tokens/s: %.3fx\n",
              rounding.in_update.tokens_per_s, rounding.stale_after_step, rounding.cast_per_step.tokens_per_s,
              rounding.cast_per_step.seconds / rounding.in_update.seconds);
  std::printf("dense bf16 MLP (4096 tokens, 512 -> 2048 -> 512) forward+backward: %.2f ms as one op (relu2's gradient "
              "rounded where computed), %.2f ms as fc's product then relu2_linear_bf16: %.3fx\n",
              mlp_fused_ms, mlp_apart_ms, mlp_apart_ms / mlp_fused_ms);
  const double mfu = dense.model_gflop / dense.seconds / gemm;
  const double mtp_overhead = mtp.seconds / dense.seconds - 1.0;
  std::printf("dense: %.0f tokens/s (target >= 1800), MFU %.2f (target >= 0.50); aam: %.0f tokens/s, MFU %.2f\n",
              dense.tokens_per_s, mfu, hybrid.tokens_per_s, hybrid.model_gflop / hybrid.seconds / gemm);
  const double mtp_flops = mtp.model_gflop / dense.model_gflop - 1.0;
  const double deep_overhead = deep_mtp.seconds / deep.seconds - 1.0, deep_flops = deep_mtp.model_gflop / deep.model_gflop - 1.0;
  std::printf("dense + MTP depth 1: %.0f tokens/s, step +%.1f%% over dense (target <= 25%%; useful FLOPs +%.1f%%, a floor "
              "at 4 layers)\n",
              mtp.tokens_per_s, 100.0 * mtp_overhead, 100.0 * mtp_flops);
  std::printf("12 layers: dense %.0f tokens/s, + MTP depth 1 %.0f tokens/s, step +%.1f%% (useful FLOPs +%.1f%%)\n",
              deep.tokens_per_s, deep_mtp.tokens_per_s, 100.0 * deep_overhead, 100.0 * deep_flops);
  bench::JsonLine("train_step").add("tokens_per_s_dense", dense.tokens_per_s, 1).add("mfu_dense", mfu, 3)
      .add("tokens_per_s_mtp", mtp.tokens_per_s, 1).add("mtp_step_overhead", mtp_overhead, 3)
      .add("mtp_flops_overhead", mtp_flops, 3).add("mtp_step_overhead_12_layers", deep_overhead, 3)
      .add("mtp_flops_overhead_12_layers", deep_flops, 3)
      .add("tokens_per_s_aam", hybrid.tokens_per_s, 1)
      .add("tokens_per_s_moe", moe.tokens_per_s, 1)
      .add("tokens_per_s_dense_bf16", dense16.tokens_per_s, 1).add("tokens_per_s_aam_bf16", hybrid16.tokens_per_s, 1)
      .add("mfu_dense_bf16", mfu16, 3).add("dense_bf16_over_fp32", dense32.seconds / dense16.seconds, 3)
      .add("aam_bf16_over_fp32", hybrid.seconds / hybrid16.seconds, 3)
      .add("tokens_per_s_dense_bf16_accum4", accum.cached.tokens_per_s, 1)
      .add("tokens_per_s_dense_bf16_accum4_recast", accum.recast.tokens_per_s, 1)
      .add("bf16_accum4_cast_once_speedup", accum.recast.seconds / accum.cached.seconds, 3)
      .add("bf16_accum4_copies_recast", static_cast<double>(accum.recast_copies), 0)
      .add("bf16_weight_copies_mib_dense", accum.copies_mib, 1).add("bf16_weight_cast_ms_dense", accum.cast_ms, 2)
      .add("tokens_per_s_dense_bf16_cast_per_step", rounding.cast_per_step.tokens_per_s, 1)
      .add("bf16_rounding_in_update_speedup", rounding.cast_per_step.seconds / rounding.in_update.seconds, 3)
      .add("bf16_copies_stale_after_step", static_cast<double>(rounding.stale_after_step), 0)
      .add("bf16_mlp_ms_fused", mlp_fused_ms, 2).add("bf16_mlp_ms_apart", mlp_apart_ms, 2)
      .add("bf16_mlp_fused_speedup", mlp_apart_ms / mlp_fused_ms, 3)
      .add("step_peak_mib_dense", dense32.step_peak_mib, 1).add("step_peak_mib_dense_bf16", dense16.step_peak_mib, 1).add("bf16_peak_gflops", bf16_peak, 1)
      .add("gemm_gflops", gemm, 1).print();
  return 0;
}
