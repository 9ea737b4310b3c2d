// bench/train_step/train_step_cuda.cu: the dense reference model's training step (forward,
// backward, AdamW) on one GPU, fp32 and Bf16Mixed (bf16 product operands on the tensor cores:
// the linear layers through cuBLAS GemmEx, the fused attention in the bf16 FlashAttention-2
// kernels; fp32 sums and everything else fp32: autograd/precision.hpp), and fp32 with TF32
// products (CudaTf32Products, the explicit option); and Bf16Mixed with the attention forced back
// to the fp32 kernels (CudaBf16Attention(false), "bf16 fp32attn"), to show what the tensor-core
// attention is worth.
//
// The configuration of bench/train_step/train_step.cpp: V = 8192, d = 512, 4 layers, 8 heads /
// 2 kv heads, T = 1024, B = 4, 8 documents per row (BOS every 128 tokens); and the Bf16Mixed step
// again at B = 16 (16K tokens, a GPU-sized micro-batch: what the fixed per-step costs, AdamW's
// update and each kernel's launch, weigh when the products grow four times) and at B = 64 (64K
// tokens a step, where the products of a d = 512 model are large enough to fill an H100: the MFU
// of the same model when its micro-batch is not the bound). The model's MLP alone, forward and
// backward at B = 4, as one op (relu2_mlp_bf16) and as fc's product then relu2_linear_bf16. Useful FLOPs as
// there: 6 x matrix parameters (the tied head counted once) per token plus 3 x the attention
// products inside documents. MFU is against the H100 SXM's dense peak of the path: 989 TFLOP/s
// bf16, 67 TFLOP/s fp32 (full fp32 products unless TF32 is asked for). Median of 10 steps after 3
// warm-ups. The ids and targets are checked and the loss mask summed on the host (BoundedIds and
// LossMask::from_host, as the trainer's loader does), and the loss is read after the step is
// queued. Each run also counts the times one step makes the host wait for the GPU
// (Cuda::host_waits: read-backs and blocking copies), printed with the step and, for the bf16
// step, in the JSON line (cuda_host_waits_per_step_dense_bf16): 1 expected, the loss read.
// AdamW writes each weight's bf16 copy in its update pass (Var::update_value), so a Bf16Mixed
// forward casts no weight; the bf16 step is timed again with the copies dropped after each step
// (every weight cast again before the next forward, as before): cuda_step_ms_dense_bf16_cast_per_step.
#include <cuda_profiler_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention/attention_problem.cuh"
#include "cuda_bench.cuh"
#include "mlp_fusion.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"

using namespace megacpp;

namespace train_step_cuda {
inline constexpr Dims kBenchDims{.d_model = 512, .n_layers = 4, .vocab = 8192, .max_seq = 4096};
inline constexpr AttentionSizes kBenchAttention{.n_heads = 8, .n_kv_heads = 2};
inline constexpr MambaSizes kBenchMamba{.d_state = 128, .headdim = 64, .expand = 2};
template <class T, Backend B>
using DenseModelOn = RecipeLM<T, B, kBenchDims, "A", kBenchAttention, kBenchMamba>;

// Model in precision P. nvcc's front end fails on the model's own member alias
// (`with_precision<Bf16Mixed>`: it loses the class-type template arguments), so the same type is
// spelled by partial specialisation here.
template <class Model, PrecisionPolicy P>
struct InPrecision;
template <class T, Backend B, Dims D, class Pt, class Lt, class H, class Mt, PrecisionPolicy Q, PrecisionPolicy P>
struct InPrecision<LM<T, B, D, Pt, Lt, H, Mt, Q>, P> {
  using type = LM<T, B, D, Pt, Lt, H, Mt, P>;
};
}  // namespace train_step_cuda

namespace {
using namespace train_step_cuda;
constexpr index_t kBatch = 4, kLargeBatch = 16, kFullBatch = 64, kSeq = 1024, kDocLen = 128;
constexpr std::int32_t kBos = 0;
constexpr double kBf16PeakTflops = 989.0, kFp32PeakTflops = 67.0;  // H100 SXM datasheet, dense

struct Figures {
  double ms = 0, forward_ms = 0, optimizer_ms = 0, tokens_per_s = 0, tflops = 0, loss = 0;
  double cast_per_step_ms = 0;  // Bf16Mixed: the step with every weight's bf16 copy dropped after it
  std::uint64_t host_waits = 0;  // times one step made the host wait for the GPU (Cuda::host_waits)
};

// The step at `batch` rows of kSeq tokens. profile: MEGACPP_PROFILE_STEP=1 marks one step of this
// run for ncu (below).
template <PrecisionPolicy P>
Figures run(const char* name, index_t batch = kBatch, bool profile = false) {
  using Model = typename InPrecision<DenseModelOn<float, Cuda>, P>::type;
  Model model{0};
  optim::AdamW<float, Cuda> opt{optim::collect_params<float, Cuda>(model), optim::AdamWOptions{.lr = 1e-3}};
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * kSeq)), targets(ids.size());
  Rng rng(2);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = i % kDocLen == 0 ? kBos : static_cast<std::int32_t>(1 + rng.below(kBenchDims.vocab - 1));
    targets[i] = static_cast<std::int32_t>(1 + rng.below(kBenchDims.vocab - 1));
  }
  const auto docs = Model::documents(ids, batch, kSeq, kBos);
  // Checked (and the mask summed) on the host before the upload, as the trainer's loader does: no
  // range pass over them, no count of the mask and no read back in the step.
  const auto in = BoundedIds<Cuda>::from_host("train_step_cuda", Shape{batch, kSeq}, ids, kBenchDims.vocab, "token");
  const auto tg = BoundedIds<Cuda>::from_host("train_step_cuda", Shape{batch, kSeq}, targets, kBenchDims.vocab, "target");
  const auto mask = LossMask<float, Cuda>::from_host("train_step_cuda", Shape{batch, kSeq}, std::vector<float>(ids.size(), 1.0f));
  double loss = 0;
  auto step = [&] {
    const auto l = model.loss(in, tg, mask, docs);
    backward(l);
    opt.step();
    opt.zero_grad();
    loss = l.item();  // read once the whole step is queued, so the host is not made to wait inside it
  };
  Figures f;
  f.ms = bench::median_ms(step, 3, 10);
  f.host_waits = Cuda::host_waits_during(step);
  if constexpr (std::is_same_v<P, Bf16Mixed>) {
    auto params = optim::collect_params<float, Cuda>(model);
    f.cast_per_step_ms = bench::median_ms([&] {
      step();
      for (auto& p : params) p.var.mutable_value();  // drops the copy AdamW wrote
    }, 3, 10);
  }
  // MEGACPP_PROFILE_STEP=1: one more step of the profiled run inside cudaProfilerStart/Stop, for
  // `ncu --profile-from-start off --print-summary per-kernel` (kernel times of one step).
  if (profile && std::getenv("MEGACPP_PROFILE_STEP")) {
    MEGACPP_CUDA_CHECK(cudaProfilerStart());
    step();
    MEGACPP_CUDA_CHECK(cudaProfilerStop());
  }
  f.loss = loss;
  // Where the step goes: the forward (with its graph) alone, and AdamW's update alone.
  f.forward_ms = bench::median_ms([&] { loss = model.loss(in, tg, mask, docs).item(); }, 1, 5);
  {
    const auto l = model.loss(in, tg, mask, docs);
    backward(l);
    f.optimizer_ms = bench::median_ms([&] { opt.step(); }, 1, 5);
    opt.zero_grad();
  }
  index_t matrix_params = 0;
  model.for_each_param([&](const std::string&, Param<float, Cuda>& p) {
    if (p.shape().rank() == 2) matrix_params += p.numel();
  });
  const double attn_per_token = 3.0 * 2 * 2 * kBenchAttention.n_heads * kBenchAttention.head_dim_for(kBenchDims.d_model) *
                                (kDocLen + 1) / 2.0;
  const double flops = (6.0 * static_cast<double>(matrix_params) + kBenchDims.n_layers * attn_per_token) * batch * kSeq;
  f.tokens_per_s = static_cast<double>(batch * kSeq) / (f.ms * 1e-3);
  f.tflops = flops / (f.ms * 1e-3) * 1e-12;
  std::printf("%-6s step %8.2f ms (forward %.2f, AdamW %.2f, backward the rest), %10.0f tokens/s, %6.2f TFLOP/s useful, "
              "loss %.4f, %llu host waits\n", name, f.ms, f.forward_ms, f.optimizer_ms, f.tokens_per_s, f.tflops, f.loss,
              static_cast<unsigned long long>(f.host_waits));
  if (f.cast_per_step_ms > 0)
    std::printf("%-6s step %8.2f ms casting every weight to bf16 again each step (AdamW writes the copies: %.2f ms)\n", name,
                f.cast_per_step_ms, f.ms);
  return f;
}
// The model's MLP at `batch` rows (mlp_fusion.hpp): milliseconds per forward+backward under bf16
// products as one op, then as fc's product followed by relu2_linear_bf16.
std::pair<double, double> mlp_ms(index_t batch) {
  bench::MlpFusionProblem<Cuda> mlp(batch, kSeq, kBenchDims.d_model);
  const double fused = bench::median_ms([&] { mlp.pass(true); }), apart = bench::median_ms([&] { mlp.pass(false); });
  return {fused, apart};
}

// The fused attention's share of the step: its forward and backward at the model's shapes (q
// (B, T, 8, 64), k and v (B, T, 2, 64), 8 documents per row), times the model's layers; fp32 or,
// with bf16, the tensor-core kernels (as the Bf16Mixed step runs them).
double attention_ms_per_step(bool bf16) {
  const CudaBf16Attention scope(bf16);
  const index_t heads = kBenchAttention.n_heads, kv = kBenchAttention.kv_heads(),
                dim = kBenchAttention.head_dim_for(kBenchDims.d_model);
  const auto docs = DocumentLayout<Cuda>::from_lengths(
      std::vector<std::vector<index_t>>(kBatch, std::vector<index_t>(kSeq / kDocLen, kDocLen)));
  bench::CudaAttentionProblem problem(docs, heads, kv, dim, 3);
  return kBenchDims.n_layers * bench::median_ms([&] {
    problem.forward();
    problem.backward();
  });
}
}  // namespace

int main() {
  if (!bench::cuda_bench_start("train_step_cuda", "dense reference model on one GPU: V 8192, d 512, 4 layers, 8/2 heads, "
                                                  "T 1024, B 4, 8 documents per row, AdamW; fp32, TF32, Bf16Mixed, "
                                                  "Bf16Mixed with fp32 attention, Bf16Mixed at B 16 and B 64"))
    return 0;
  const Figures fp32 = run<Fp32>("fp32");
  Figures tf32;
  {
    const CudaTf32Products on(true);  // the explicit TF32 option (backends/cuda/detail/gemm.cuh)
    tf32 = run<Fp32>("tf32");
  }
  const Figures bf16 = run<Bf16Mixed>("bf16", kBatch, true);  // the attention in bf16 too: the op asks for it
  const Figures bf16_large = run<Bf16Mixed>("bf16 B16", kLargeBatch);
  const Figures bf16_full = run<Bf16Mixed>("bf16 B64", kFullBatch);
  Figures bf16_fp32attn;
  {
    const CudaBf16Attention off(false);  // the fused attention back on the fp32 kernels
    bf16_fp32attn = run<Bf16Mixed>("bf16 fp32attn");
  }
  const double mfu_bf16 = bf16.tflops / kBf16PeakTflops, mfu_fp32 = fp32.tflops / kFp32PeakTflops;
  const double mfu_bf16_fp32attn = bf16_fp32attn.tflops / kBf16PeakTflops;
  const double mfu_bf16_large = bf16_large.tflops / kBf16PeakTflops;
  const double mfu_bf16_full = bf16_full.tflops / kBf16PeakTflops;
  const auto [mlp_fused_ms, mlp_apart_ms] = mlp_ms(kBatch);
  std::printf("the model's MLP under bf16 products, forward+backward at B %lld: %.3f ms as one op (relu2_mlp_bf16), "
              "%.3f ms as fc's product then relu2_linear_bf16\n",
              static_cast<long long>(kBatch), mlp_fused_ms, mlp_apart_ms);
  const double attention_ms = attention_ms_per_step(true), attention_fp32_ms = attention_ms_per_step(false);
  std::printf("fused attention forward+backward, all %lld layers: bf16 tensor cores %.2f ms of the bf16 step's %.2f; "
              "fp32 CUDA cores %.2f ms of the fp32-attention step's %.2f\n",
              static_cast<long long>(kBenchDims.n_layers), attention_ms, bf16.ms, attention_fp32_ms, bf16_fp32attn.ms);
  std::printf("\nMFU: bf16 %.4f (fp32 attention %.4f; B %lld: %.4f; B %lld: %.4f) of %.0f TFLOP/s, fp32 %.4f of %.0f "
              "TFLOP/s (target 0.30, bf16)\n",
              mfu_bf16, mfu_bf16_fp32attn, static_cast<long long>(kLargeBatch), mfu_bf16_large,
              static_cast<long long>(kFullBatch), mfu_bf16_full, kBf16PeakTflops, mfu_fp32, kFp32PeakTflops);
  bench::JsonLine json("train_step_cuda");
  json.add("device", std::string_view("cuda"))
      .add("cuda_tokens_per_s_dense", bf16.tokens_per_s, 0)
      .add("cuda_mfu_dense", mfu_bf16, 4)
      .add("cuda_tokens_per_s_dense_fp32", fp32.tokens_per_s, 0)
      .add("cuda_mfu_dense_fp32", mfu_fp32, 4)
      .add("cuda_tokens_per_s_dense_tf32", tf32.tokens_per_s, 0)
      .add("cuda_step_ms_dense_bf16", bf16.ms, 2)
      .add("cuda_step_ms_dense_bf16_cast_per_step", bf16.cast_per_step_ms, 2)
      .add("cuda_forward_ms_dense_bf16", bf16.forward_ms, 2)
      .add("cuda_adamw_ms_dense_bf16", bf16.optimizer_ms, 2)
      .add("cuda_attention_ms_dense", attention_ms, 2)
      .add("cuda_tokens_per_s_dense_fp32attn", bf16_fp32attn.tokens_per_s, 0)
      .add("cuda_mfu_dense_fp32attn", mfu_bf16_fp32attn, 4)
      .add("cuda_step_ms_dense_fp32attn", bf16_fp32attn.ms, 2)
      .add("cuda_attention_ms_dense_fp32attn", attention_fp32_ms, 2)
      .add("cuda_tokens_per_s_dense_B16", bf16_large.tokens_per_s, 0)
      .add("cuda_mfu_dense_B16", mfu_bf16_large, 4)
      .add("cuda_step_ms_dense_B16", bf16_large.ms, 2)
      .add("cuda_tokens_per_s_dense_B64", bf16_full.tokens_per_s, 0)
      .add("cuda_mfu_dense_B64", mfu_bf16_full, 4)
      .add("cuda_step_ms_dense_B64", bf16_full.ms, 2)
      .add("cuda_mlp_ms_fused_bf16", mlp_fused_ms, 3)
      .add("cuda_mlp_ms_apart_bf16", mlp_apart_ms, 3)
      .add("cuda_host_waits_per_step_dense_bf16", static_cast<double>(bf16.host_waits), 0);
  json.print();
  return 0;
}
