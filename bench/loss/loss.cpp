// bench_loss: peak memory and time of the LM-head loss, fused (row chunks, never the whole
// logits) against the naive path (matmul -> softcap -> cross_entropy, logits materialised).
//
// The figure: at B*T = 8192 tokens, V = 65536, d = 512 (fp32) the fused path's peak memory
// must be below 1/4 of the naive path's. Peak is counted by the CPU backend's allocator (every
// tensor), from just before the forward to the end of the backward, inputs excluded.
#include <chrono>
#include <cstdio>

#include "bench_common.hpp"
#include "megacpp/nn/linear_cross_entropy.hpp"

using namespace megacpp;

namespace {
struct Run {
  double peak_mb = 0, seconds = 0, loss = 0;
};

template <class F>
Run measure(F&& loss_fn) {
  const std::size_t base = Cpu::memory_stats().current_bytes;
  Cpu::reset_peak_memory();
  const auto t0 = std::chrono::steady_clock::now();
  Run r;
  {
    Var<float, Cpu> loss = loss_fn();
    r.loss = loss.item();
    backward(loss);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_mb = static_cast<double>(Cpu::memory_stats().peak_bytes - base) / (1 << 20);
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  const index_t tokens = args.quick ? 1024 : 8192, vocab = args.quick ? 8192 : 65536, d = 512, chunk = 1024;
  char config[256];
  std::snprintf(config, sizeof config, "fp32 tokens %lld, vocab %lld, d %lld, softcap 30, fused chunk %lld rows",
                static_cast<long long>(tokens), static_cast<long long>(vocab), static_cast<long long>(d),
                static_cast<long long>(chunk));
  bench::print_system_info("loss", config, args);

  Rng rng(0);
  auto h = Var<float, Cpu>::parameter(randn<float, Cpu>({tokens, d}, rng));
  auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({vocab, d}, rng, 0.02));
  std::vector<std::int32_t> t(static_cast<std::size_t>(tokens));
  for (auto& x : t) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  const auto targets = CpuTensor<std::int32_t>::from_host({tokens}, t);
  const auto mask = CpuTensor<float>::full({tokens}, 1.0f);
  // Gradient buffers of the inputs exist in both runs (an optimizer keeps them): allocate first.
  h.grad_buffer();
  w.grad_buffer();

  const Run fused = measure([&] { return linear_cross_entropy(h, w, targets, mask, {30.0, chunk}); });
  const Run naive = measure([&] { return cross_entropy(softcap(matmul(h, w, false, true), 30.0), targets, mask); });

  std::printf("\n%-8s %12s %10s %12s\n", "path", "peak MiB", "fwd+bwd s", "loss");
  std::printf("%-8s %12.1f %10.2f %12.6f\n", "fused", fused.peak_mb, fused.seconds, fused.loss);
  std::printf("%-8s %12.1f %10.2f %12.6f\n", "naive", naive.peak_mb, naive.seconds, naive.loss);
  std::printf("fused / naive peak memory: %.3f (target < 0.25); the logits alone are %.1f MiB\n",
              fused.peak_mb / naive.peak_mb, static_cast<double>(tokens * vocab * 4) / (1 << 20));
  bench::JsonLine("loss").add("peak_mb_fused", fused.peak_mb, 1).add("peak_mb_naive", naive.peak_mb, 1)
      .add("fused_s", fused.seconds, 3).add("naive_s", naive.seconds, 3).add("tokens", static_cast<long long>(tokens))
      .add("vocab", static_cast<long long>(vocab)).print();
  return 0;
}
