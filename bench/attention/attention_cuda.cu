// bench/attention/attention_cuda.cu: FusedAttention<Cuda> forward and forward+backward, causal,
// on one GPU: fp32 on the CUDA cores (backends/cuda/detail/attention.cuh), and bf16 on the tensor
// cores inside a CudaBf16Attention scope (backends/cuda/detail/attention_mma.cuh).
//
// Shapes as the FlashAttention papers benchmark them: batch x seq = 8K tokens, 16 heads (MHA),
// head_dim 128 and 64, seq 4096, one document per row (docs1) or 8 documents of 512 tokens
// (docs8). FLOPs count the visible (query, key) pairs only: forward 4 x head_dim per pair (two
// products), forward+backward 3.5x the forward (FlashAttention-2's convention: the backward's
// five products are 2.5 forwards). Every call is timed with CUDA events, median of 10 after 2
// warm-ups. The comparison the CUDA issue sets: FlashAttention-2's published H100 bf16 causal
// forward at seq 4K, head_dim 128, is 319 TFLOP/s (Shah et al., "FlashAttention-3", 2024,
// arXiv 2407.08608, figure 5). The fp32 kernel runs on the CUDA cores, whose H100 SXM peak is
// 67 TFLOP/s, so it prints its fraction of both; the bf16 kernels (same inputs, fp32 in memory,
// tiles rounded to bf16 in shared memory) print theirs of FlashAttention-2 and their speedup.
//
//   bench_attention_cuda                 every case, then the JSON line
//   bench_attention_cuda CASE [CASE...]  only the named cases' rows (e.g. bf16_d128_docs8, for a
//                                        profiler: ncu --print-summary per-kernel), no JSON line
#include <cstdio>
#include <cstring>
#include <vector>

#include "attention/attention_problem.cuh"
#include "cuda_bench.cuh"

namespace {

using namespace megacpp;

constexpr double kFa2PublishedTflops = 319.0;  // bf16 causal forward, seq 4K, head_dim 128 (FA3 paper)
constexpr double kFp32CudaCorePeakTflops = 67.0;  // H100 SXM fp32 (NVIDIA H100 datasheet)

struct Result {
  double fwd_ms = 0, fwdbwd_ms = 0, fwd_tflops = 0, fwdbwd_tflops = 0;
  long long pairs = 0;
};

// bf16: inside a CudaBf16Attention scope (the tensor-core kernels).
Result run(index_t batch, index_t seq, index_t heads, index_t dim, index_t docs_per_row, bool bf16 = false) {
  const CudaBf16Attention scope(bf16);
  std::vector<std::vector<index_t>> rows(static_cast<std::size_t>(batch),
                                         std::vector<index_t>(static_cast<std::size_t>(docs_per_row), seq / docs_per_row));
  bench::CudaAttentionProblem problem(DocumentLayout<Cuda>::from_lengths(rows), heads, heads, dim, 42);
  auto forward = [&] { problem.forward(); };
  auto backward = [&] { problem.backward(); };
  Result r;
  for (index_t d = 0; d < docs_per_row; ++d) {
    const long long len = seq / docs_per_row;
    r.pairs += batch * len * (len + 1) / 2;
  }
  const double fwd_flops = 4.0 * static_cast<double>(dim) * static_cast<double>(r.pairs) * static_cast<double>(heads);
  r.fwd_ms = bench::median_ms(forward);
  r.fwdbwd_ms = bench::median_ms([&] {
    forward();
    backward();
  });
  r.fwd_tflops = fwd_flops / (r.fwd_ms * 1e-3) / 1e12;
  r.fwdbwd_tflops = 3.5 * fwd_flops / (r.fwdbwd_ms * 1e-3) / 1e12;
  return r;
}

void print_row(const char* name, const Result& r) {
  std::printf("  %-22s %10.3f %12.2f %12.3f %14.2f\n", name, r.fwd_ms, r.fwd_tflops, r.fwdbwd_ms, r.fwdbwd_tflops);
}

// The named cases: {name, head_dim, documents per row, bf16}.
struct Case {
  const char* name;
  index_t dim, docs;
  bool bf16;
};
constexpr Case kCases[] = {{"fp32_d128_docs1", 128, 1, false}, {"fp32_d128_docs8", 128, 8, false},
                           {"fp32_d64_docs1", 64, 1, false},   {"fp32_d64_docs8", 64, 8, false},
                           {"bf16_d128_docs1", 128, 1, true},  {"bf16_d128_docs8", 128, 8, true},
                           {"bf16_d64_docs1", 64, 1, true},    {"bf16_d64_docs8", 64, 8, true}};

// The case named `name`, or null.
const Case* find_case(const char* name) {
  for (const Case& c : kCases)
    if (std::strcmp(c.name, name) == 0) return &c;
  return nullptr;
}

// Runs a case of the table: batch 2 x seq 4096, 16 heads (the shapes of the top comment).
Result run_case(const char* name) {
  const Case* c = find_case(name);
  check(c != nullptr, "bench_attention_cuda", "no case named ", name);
  return run(2, 4096, 16, c->dim, c->docs, c->bf16);
}

// Runs only the cases named on the command line; false (and the list) for a name it does not know.
bool run_named(int argc, char** argv) {
  std::printf("\n  %-22s %10s %12s %12s %14s\n", "case", "fwd ms", "fwd TFLOP/s", "f+b ms", "f+b TFLOP/s");
  for (int i = 1; i < argc; ++i) {
    const Case* found = find_case(argv[i]);
    if (!found) {
      std::fprintf(stderr, "bench_attention_cuda: no case named '%s'; the cases:", argv[i]);
      for (const Case& c : kCases) std::fprintf(stderr, " %s", c.name);
      std::fprintf(stderr, "\n");
      return false;
    }
    print_row(found->name, run_case(found->name));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::cuda_bench_start("attention_cuda",
                               "FusedAttention<Cuda> fp32 and bf16 (CudaBf16Attention), causal, batch 2 x seq 4096, "
                               "16 heads, head_dim 128 and 64, docs1 and docs8 (8 x 512 tokens per row)"))
    return 0;
  if (argc > 1) return run_named(argc, argv) ? 0 : 2;
  const Result d128 = run_case("fp32_d128_docs1"), d128_docs8 = run_case("fp32_d128_docs8");
  const Result d64 = run_case("fp32_d64_docs1"), d64_docs8 = run_case("fp32_d64_docs8");
  const Result b128 = run_case("bf16_d128_docs1"), b128_docs8 = run_case("bf16_d128_docs8");
  const Result b64 = run_case("bf16_d64_docs1"), b64_docs8 = run_case("bf16_d64_docs8");
  std::printf("\n  %-22s %10s %12s %12s %14s\n", "case", "fwd ms", "fwd TFLOP/s", "f+b ms", "f+b TFLOP/s");
  print_row("d128 docs1", d128);
  print_row("d128 docs8", d128_docs8);
  print_row("d64 docs1", d64);
  print_row("d64 docs8", d64_docs8);
  print_row("bf16 d128 docs1", b128);
  print_row("bf16 d128 docs8", b128_docs8);
  print_row("bf16 d64 docs1", b64);
  print_row("bf16 d64 docs8", b64_docs8);
  const double docs8_vs_docs1 = d128_docs8.fwdbwd_ms / d128.fwdbwd_ms;
  std::printf("\ndocs8 / docs1 fwd+bwd time: %.3f (head_dim 128; 1/8 = 0.125 is the visible-pair ratio; target <= 0.25)\n",
              docs8_vs_docs1);
  std::printf("forward vs FlashAttention-2's published H100 bf16 (%.0f TFLOP/s): %.3f; vs the fp32 CUDA-core peak (%.0f): %.3f\n",
              kFa2PublishedTflops, d128.fwd_tflops / kFa2PublishedTflops, kFp32CudaCorePeakTflops,
              d128.fwd_tflops / kFp32CudaCorePeakTflops);
  std::printf("bf16 tensor cores, head_dim 128: forward %.3f of FlashAttention-2's published (target >= 0.5); "
              "speedup over fp32 forward %.2fx, fwd+bwd %.2fx; docs8 / docs1 fwd+bwd %.3f\n",
              b128.fwd_tflops / kFa2PublishedTflops, d128.fwd_ms / b128.fwd_ms, d128.fwdbwd_ms / b128.fwdbwd_ms,
              b128_docs8.fwdbwd_ms / b128.fwdbwd_ms);
  bench::JsonLine json("attention_cuda");
  json.add("device", std::string_view("cuda"))
      .add("cuda_fwd_tflops_T4096_docs1", d128.fwd_tflops)
      .add("cuda_fwdbwd_tflops_T4096_docs1", d128.fwdbwd_tflops)
      .add("cuda_fwdbwd_ms_T4096_docs1", d128.fwdbwd_ms, 3)
      .add("cuda_fwdbwd_ms_T4096_docs8", d128_docs8.fwdbwd_ms, 3)
      .add("cuda_docs8_vs_docs1", docs8_vs_docs1, 3)
      .add("cuda_fwd_tflops_T4096_docs1_d64", d64.fwd_tflops)
      .add("cuda_fwdbwd_tflops_T4096_docs1_d64", d64.fwdbwd_tflops)
      .add("cuda_fwd_vs_fa2_published", d128.fwd_tflops / kFa2PublishedTflops, 3)
      .add("cuda_bf16_fwd_tflops_T4096_docs1", b128.fwd_tflops)
      .add("cuda_bf16_fwdbwd_tflops_T4096_docs1", b128.fwdbwd_tflops)
      .add("cuda_bf16_fwdbwd_ms_T4096_docs1", b128.fwdbwd_ms, 3)
      .add("cuda_bf16_fwdbwd_ms_T4096_docs8", b128_docs8.fwdbwd_ms, 3)
      .add("cuda_bf16_fwd_tflops_T4096_docs1_d64", b64.fwd_tflops)
      .add("cuda_bf16_fwdbwd_tflops_T4096_docs1_d64", b64.fwdbwd_tflops)
      .add("cuda_bf16_fwdbwd_ms_T4096_docs8_d64", b64_docs8.fwdbwd_ms, 3)
      .add("cuda_bf16_fwd_vs_fa2_published", b128.fwd_tflops / kFa2PublishedTflops, 3);
  json.print();
  return 0;
}
