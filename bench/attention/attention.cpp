// bench/attention/attention.cpp: the fused document-masked attention op (flash_attention, CPU
// kernel) against the dense reference (dense_attention, materialised scores), forward + backward.
//
// Setup: fp32, batch 1, 8 query heads, 2 kv heads, head_dim 64, softcap 50 (the recipe
// default), no window; T in {1024, 4096}; (a) one document per row, (b) 8 equal documents.
// Printed, in order:
//   - system info and the fp32 FMA peak (at the start and at the end of the run)
//   - a correctness check: fused vs dense values and gradients at T = 1024 (1 and 8 documents)
//   - median times of every case (timed round-robin, bench_common.hpp), with the GEMM rate of this
//     run (megacpp matmul, fp32 2048^3: bench/gemm's matmul_fwd_gflops_2048) timed in the same
//     rounds as the T = 4096 cases; fused speedup over dense,
//     8-document / 1-document cost, useful GFLOP/s and its fraction of the GEMM rate, with the
//     issue's targets: dense/fused >= 3 at T = 4096 (a); fused (b) <= 1/5 of fused (a);
//     useful GFLOP/s >= 40% of the GEMM rate
//   - peak memory of fused forward + backward at T = 4096 and 16384 (one document): O(T * D)
// Useful FLOPs count only visible (query, key) pairs: per head, pairs = sum over documents of
// len (len + 1) / 2; forward 2 GEMMs (S = QK^T, O = PV), backward 5 (S, dP, dV, dK, dQ), each
// 2 * head_dim flops per pair: 14 * head_dim * pairs * heads.
#include <cinttypes>
#include <cmath>
#include <cstdint>

#include "bench_common.hpp"
#include "megacpp/nn/attention.hpp"

namespace {

using namespace megacpp;
using V = Var<float, Cpu>;

constexpr index_t kHeads = 8, kKvHeads = 2, kHeadDim = 64;
const AttentionOptions kOptions{0.0, 50.0, 0};  // scale 1/sqrt(64), softcap 50, no window

// One row of `docs` equal documents: BOS every seq / docs tokens.
DocumentLayout<Cpu> equal_documents(index_t seq, index_t docs) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(seq), 7);
  for (index_t d = 0; d < docs; ++d) ids[static_cast<std::size_t>(d * (seq / docs))] = 0;
  return DocumentLayout<Cpu>::from_tokens(ids, 1, seq, /*bos_id=*/0);
}

double useful_flops(const DocumentLayout<Cpu>& docs) {
  double pairs = 0;
  for (const DocumentSpan& s : docs.spans[0]) pairs += 0.5 * static_cast<double>(s.length) * static_cast<double>(s.length + 1);
  return 14.0 * kHeadDim * pairs * kHeads;
}

// Inputs of one problem size: q (1, T, 8, 64), k, v (1, T, 2, 64), dO like q.
struct Problem {
  index_t seq;
  V q, k, v;
  Tensor<float, Cpu> upstream;
  explicit Problem(index_t t) : seq(t) {
    Rng rng(1000 + static_cast<std::uint64_t>(t));
    q = V::parameter(randn<float, Cpu>({1, t, kHeads, kHeadDim}, rng));
    k = V::parameter(randn<float, Cpu>({1, t, kKvHeads, kHeadDim}, rng));
    v = V::parameter(randn<float, Cpu>({1, t, kKvHeads, kHeadDim}, rng));
    upstream = randn<float, Cpu>({1, t, kHeads, kHeadDim}, rng);
  }
  void zero_grad() {
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
  }
  template <class Attend>
  void forward_backward(const DocumentLayout<Cpu>& docs, Attend attend) {
    V o = attend(q, k, v, docs, kOptions);
    backward(o, upstream);
  }
};

auto fused = [](const V& q, const V& k, const V& v, const DocumentLayout<Cpu>& d, const AttentionOptions& o) {
  return flash_attention(q, k, v, d, o);
};
auto dense = [](const V& q, const V& k, const V& v, const DocumentLayout<Cpu>& d, const AttentionOptions& o) {
  return dense_attention(q, k, v, d, o);
};

double max_relative_error(const Tensor<float, Cpu>& a, const Tensor<float, Cpu>& b) {
  double diff = 0, scale = 1e-30;
  for (index_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a.data()[i]) - b.data()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b.data()[i])));
  }
  return diff / scale;
}

// fused vs dense at one size: values and all three gradients.
bool check_against_dense(Problem& p, const DocumentLayout<Cpu>& docs) {
  V of = flash_attention(p.q, p.k, p.v, docs, kOptions);
  p.zero_grad();
  backward(of, p.upstream);
  const auto gq = p.q.grad().clone(), gk = p.k.grad().clone(), gv = p.v.grad().clone();
  V od = dense_attention(p.q, p.k, p.v, docs, kOptions);
  p.zero_grad();
  backward(od, p.upstream);
  const double eo = max_relative_error(of.value(), od.value()), eq = max_relative_error(gq, p.q.grad()),
               ek = max_relative_error(gk, p.k.grad()), ev = max_relative_error(gv, p.v.grad());
  const bool ok = eo < 1e-5 && eq < 1e-4 && ek < 1e-4 && ev < 1e-4;
  std::printf("check T = %" PRId64 ", %zu document(s): fused vs dense max |diff| / max|dense|: o %.1e, dq %.1e, dk %.1e, dv %.1e -> %s\n",
              p.seq, docs.spans[0].size(), eo, eq, ek, ev, ok ? "ok" : "FAILED");
  p.zero_grad();
  return ok;
}

// Medians of every case, in the order: fused 1/8 docs, dense 1/8 docs at T = 1024, then the same
// at T = 4096 (ms[0..7]); the GEMM rate is timed in the same round-robin as the T = 4096 cases so
// that a change of machine state hits both alike.
struct Timings {
  std::vector<double> ms;
  double gemm_gflops = 0;
  bool ok = true;
};

Timings time_all(const bench::BenchArgs& args) {
  Timings out;
  Problem p1024(1024), p4096(4096);
  out.ok = check_against_dense(p1024, equal_documents(1024, 8)) && out.ok;
  out.ok = check_against_dense(p1024, equal_documents(1024, 1)) && out.ok;
  // megacpp matmul, fp32 2048^3: the figure bench/gemm reports as matmul_fwd_gflops_2048.
  const index_t n = 2048;
  Rng rng(7);
  const V a(randn<float, Cpu>({n, n}, rng)), b(randn<float, Cpu>({n, n}, rng));

  std::printf("\n%-6s %6s %5s %11s %10s %6s %12s %14s\n", "kernel", "T", "docs", "median ms", "min ms", "reps",
              "useful GF/s", "scores/useful");
  for (Problem* p : {&p1024, &p4096}) {
    const index_t docs_per_row[] = {1, 8, 1, 8};
    const bool fused_case[] = {true, true, false, false};
    std::vector<DocumentLayout<Cpu>> layouts;
    std::vector<bench::TimedCase> cases;
    for (int i = 0; i < 4; ++i) layouts.push_back(equal_documents(p->seq, docs_per_row[i]));
    for (int i = 0; i < 4; ++i) {
      const DocumentLayout<Cpu>* docs = &layouts[static_cast<std::size_t>(i)];
      if (fused_case[i]) cases.push_back({"fused", [p, docs] { p->forward_backward(*docs, fused); }, [p] { p->zero_grad(); }});
      else cases.push_back({"dense", [p, docs] { p->forward_backward(*docs, dense); }, [p] { p->zero_grad(); }});
    }
    const bool big = p->seq == 4096;
    if (big) cases.push_back({"gemm", [&] { V c = matmul(a, b); }});
    const auto t = bench::time_interleaved(cases, args.quick ? 0.2 : (big ? 3.0 : 1.0), args.quick ? 2 : 3);
    for (int i = 0; i < 4; ++i) {
      const DocumentLayout<Cpu>& docs = layouts[static_cast<std::size_t>(i)];
      // score elements computed per visible pair: the fused kernel's counters; dense computes seq^2
      const double pairs = useful_flops(docs) / (14.0 * kHeadDim);
      double computed_per_useful = static_cast<double>(p->seq) * static_cast<double>(p->seq) * kHeads / pairs;
      if (fused_case[i]) {
        NoGrad no_grad;
        AttentionStats stats;
        flash_attention(p->q, p->k, p->v, docs, kOptions, &stats);
        computed_per_useful = static_cast<double>(stats.scores) / pairs;
      }
      out.ms.push_back(t[static_cast<std::size_t>(i)].median_s * 1e3);
      std::printf("%-6s %6" PRId64 " %5" PRId64 " %11.1f %10.1f %6d %12.1f %14.2f\n", cases[static_cast<std::size_t>(i)].name.c_str(),
                  p->seq, docs_per_row[i], t[static_cast<std::size_t>(i)].median_s * 1e3, t[static_cast<std::size_t>(i)].min_s * 1e3,
                  t[static_cast<std::size_t>(i)].reps, useful_flops(docs) / t[static_cast<std::size_t>(i)].median_s * 1e-9,
                  computed_per_useful);
    }
    if (big) {
      out.gemm_gflops = 2.0 * n * n * n / t[4].median_s * 1e-9;
      std::printf("%-6s %6" PRId64 " %5s %11.1f %10.1f %6d %12.1f   (megacpp matmul, fp32 2048^3, timed in the same rounds)\n",
                  "gemm", n, "-", t[4].median_s * 1e3, t[4].min_s * 1e3, t[4].reps, out.gemm_gflops);
    }
  }
  return out;
}

struct MemoryFigure {
  double base_mb = 0, peak_mb = 0, seconds = 0;
};
// Peak bytes (Cpu::memory_stats) during one fused forward + backward, inputs already allocated.
MemoryFigure fused_peak(index_t seq) {
  Problem p(seq);
  const auto docs = equal_documents(seq, 1);
  MemoryFigure m;
  m.base_mb = static_cast<double>(Cpu::memory_stats().current_bytes) / (1 << 20);
  Cpu::reset_peak_memory();
  const auto t0 = std::chrono::steady_clock::now();
  p.forward_backward(docs, fused);
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.peak_mb = static_cast<double>(Cpu::memory_stats().peak_bytes) / (1 << 20);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("attention",
                           "fp32 fused flash_attention vs dense_attention, forward + backward; batch 1, heads 8, kv_heads 2, "
                           "head_dim 64, softcap 50, no window; T in {1024, 4096}, 1 or 8 equal documents per row",
                           args);
  const index_t q_rows = cpu::flash::kDefaultQueryRows, tile_k = cpu::flash::kDefaultKeyTile;  // kOptions keeps the defaults
  std::printf("cpu kernel:    query tile %" PRId64 " rows (%" PRId64 " tokens x %" PRId64 " heads), key tile %" PRId64 "\n",
              q_rows, q_rows / (kHeads / kKvHeads), kHeads / kKvHeads, tile_k);
  const double peak_start = bench::fma_peak_gflops();
  std::printf("fp32 FMA peak: %.1f GFLOP/s measured over all threads\n", peak_start);

  const Timings timings = time_all(args);  // the problems are freed before the memory figures below
  const std::vector<double>& ms = timings.ms;
  const double gemm = timings.gemm_gflops;
  const bool ok = timings.ok;
  auto verdict = [](bool met) { return met ? "met" : "NOT met"; };
  // ms: [0] fused 1024/1, [1] fused 1024/8, [2] dense 1024/1, [3] dense 1024/8, [4..7] the same at 4096
  const double useful_4096 = useful_flops(equal_documents(4096, 1));
  const double fused_gflops = useful_4096 / (ms[4] * 1e-3) * 1e-9;
  std::printf("\nT = 1024: dense / fused: %.2fx (1 document), %.2fx (8 documents); fused 8 docs / 1 doc: %.3f\n",
              ms[2] / ms[0], ms[3] / ms[1], ms[1] / ms[0]);
  std::printf("T = 4096: dense / fused: %.2fx (1 document; target >= 3: %s), %.2fx (8 documents)\n", ms[6] / ms[4],
              verdict(ms[6] >= 3 * ms[4]), ms[7] / ms[5]);
  std::printf("T = 4096: fused 8 docs / 1 doc: %.3f (target <= 0.200: %s; useful work ratio 0.125)\n", ms[5] / ms[4],
              verdict(5 * ms[5] <= ms[4]));
  std::printf("T = 4096: fused useful %.1f GFLOP/s = %.0f%% of the GEMM rate %.1f (target >= 40%%: %s)\n", fused_gflops,
              100.0 * fused_gflops / gemm, gemm, verdict(fused_gflops >= 0.4 * gemm));

  const MemoryFigure m4096 = fused_peak(4096);
  const MemoryFigure m16384 = fused_peak(16384);
  const double dense_scores_mb = 16384.0 * 16384.0 * kHeads * sizeof(float) / (1 << 20);
  std::printf("\npeak memory, fused forward + backward, one document (inputs q, k, v, dO included):\n");
  std::printf("  T =  4096: %8.1f MB (inputs %.1f MB), %.2f s\n", m4096.peak_mb, m4096.base_mb, m4096.seconds);
  std::printf("  T = 16384: %8.1f MB (inputs %.1f MB), %.2f s; %.0f bytes per token per head\n", m16384.peak_mb,
              m16384.base_mb, m16384.seconds, m16384.peak_mb * (1 << 20) / 16384.0 / kHeads);
  std::printf("  peak(16384) / peak(4096) = %.2f (O(T): 4, O(T^2): 16); one dense (heads, T, T) fp32 score tensor at "
              "T = 16384 would be %.0f MB\n",
              m16384.peak_mb / m4096.peak_mb, dense_scores_mb);

  const double peak_end = bench::fma_peak_gflops();
  std::printf("\nfp32 FMA peak at the end: %.1f GFLOP/s (a change from the start means the machine changed state)\n", peak_end);
  if (!ok) std::printf("CHECK FAILED: see the fused vs dense lines above\n");

  bench::JsonLine json("attention");
  json.add("dense_ms_T4096_docs1", ms[6])
      .add("fused_ms_T1024_docs1", ms[0])
      .add("fused_ms_T4096_docs1", ms[4])
      .add("fused_ms_T4096_docs8", ms[5])
      .add("fused_useful_gflops_T4096_docs1", fused_gflops)
      .add("gemm_gflops", gemm)
      .add("peak_mb_T16384", m16384.peak_mb);
  json.print();
  return ok ? 0 : 1;
}
