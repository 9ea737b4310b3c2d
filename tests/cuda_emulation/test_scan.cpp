// tests/cuda_emulation/test_scan.cpp: the CUDA SSM scan (SsmScan<Cuda>, detail/ssm/scan*.cuh) on
// the emulator against the CPU backend's SsmScan<Cpu> in float: y, the saved chunk states and every
// gradient, on packed rows of documents (documents starting inside chunks, longer than a chunk, a
// row starting mid-document); bitwise the same from run to run and under every schedule; one
// document's inputs never reaching another's outputs. The contract's own cases
// (tests/support/kernel_cases/ssm_scan.hpp) go through autograd Vars on a backend, not host
// vectors, so their layouts are reused here rather than the cases themselves.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "emulator/options.hpp"
#include "host_arrays.hpp"
#include "scan_emulated.hpp"
#include "support/documents_testing.hpp"

#include "megacpp/backends/cpu/kernels.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::cuda_emulation {
namespace {

using kernels::ScanParams;

// Each tensor's largest error relative to its largest element. Both backends sum in float in
// different orders (the CPU in chunk matrices, the CUDA kernels token by token): a few ulps of the
// tensor's scale, growing with the chunk length. Largest measured (GCC 12 and Clang 14, x86-64):
// 1.4e-6 (dq, chunks of 64), at most 5.8e-7 elsewhere. 5e-6 is the bound the contract's cases hold the
// CPU kernel to against the literal recurrence in float (kernel_cases/ssm_scan.hpp); the GPU tests
// (tests/cuda) allow 1e-5.
constexpr double kTolerance = 5e-6;
constexpr std::int32_t kBos = 0;

struct Shape {
  index_t heads, groups, rank, d_state, head_dim, chunk;
  bool shift, D;  // operands present
};

// A problem on packed rows of documents (lengths as testing::packed_tokens takes them), with the
// CPU layout its reference runs on. Operands in the ranges the layers produce: log_alpha = A dt < 0,
// gamma and shift in (0, dt).
struct Case {
  DocumentLayout<Cpu> docs;
  ScanProblem problem;
};

std::vector<float> normal(std::size_t n, Rng& rng) {
  std::vector<float> x(n);
  for (float& e : x) e = static_cast<float>(rng.normal());
  return x;
}

Case make_case(DocumentLayout<Cpu> docs, const Shape& s, std::uint64_t seed) {
  Case c{std::move(docs), {}};
  const index_t batch = c.docs.batch, seq = c.docs.seq;
  ScanProblem& p = c.problem;
  p.sizes = ScanParams{batch, seq, s.heads, s.groups, s.rank, s.d_state, s.head_dim, s.chunk,
                       kernels::max_chunks_per_row(c.docs.doc_ids_host, batch, seq, s.chunk)};
  p.doc_ids = c.docs.doc_ids_host;
  Rng rng(seed);
  const auto tokens = static_cast<std::size_t>(batch * seq);
  p.q = normal(tokens * static_cast<std::size_t>(s.groups * s.rank * s.d_state), rng);
  p.k = normal(p.q.size(), rng);
  p.v = normal(tokens * static_cast<std::size_t>(s.heads * s.rank * s.head_dim), rng);
  p.log_alpha = uniform<float>(tokens * static_cast<std::size_t>(s.heads), rng, -0.9, -0.05);
  p.gamma = uniform<float>(p.log_alpha.size(), rng, 0.05, 0.6);
  if (s.shift) p.shift = uniform<float>(p.log_alpha.size(), rng, 0.05, 0.6);
  if (s.D) p.D = normal(static_cast<std::size_t>(s.heads), rng);
  p.dy = normal(p.v.size(), rng);
  return c;
}

Case make_case(const std::vector<std::vector<index_t>>& rows, const Shape& s, std::uint64_t seed) {
  return make_case(testing::packed_layout(rows, kBos), s, seed);
}

// Random gradients to add into (the kernels add, never overwrite); dshift and dD only where the
// operand exists.
ScanRun random_initial(const ScanProblem& p, std::uint64_t seed) {
  Rng rng(seed);
  const ScanParams& s = p.sizes;
  ScanRun r;
  r.dq = normal(static_cast<std::size_t>(s.batch * s.seq * s.heads * s.rank * s.d_state), rng);
  r.dk = normal(r.dq.size(), rng);
  r.dv = normal(p.v.size(), rng);
  r.dlog_alpha = normal(p.log_alpha.size(), rng);
  r.dgamma = normal(p.gamma.size(), rng);
  r.dshift = normal(p.shift.size(), rng);
  r.dD = normal(p.D.size(), rng);
  return r;
}

// SsmScan<Cpu>: the reference.
ScanRun cpu_scan(const Case& c, const ScanRun& initial) {
  const ScanProblem& p = c.problem;
  const ScanParams& s = p.sizes;
  ScanRun r = initial;
  r.y.assign(p.v.size(), 0.0f);
  r.chunk_states.assign(static_cast<std::size_t>(s.batch * s.heads * s.max_chunks * s.d_state * s.head_dim), 0.0f);
  const kernels::ScanOperands<float> in = scan_operands(p);
  kernels::SsmScan<Cpu>::forward<float>(s, c.docs, in, r.y.data(), r.chunk_states.data());
  kernels::SsmScan<Cpu>::backward<float>(s, c.docs, in, p.dy.data(), r.chunk_states.data(), scan_gradients(r));
  return r;
}

// Whether chunk ci of row b is planned (the saved states past a row's last chunk are unspecified).
std::vector<bool> planned_chunks(const ScanProblem& p) {
  const ScanParams& s = p.sizes;
  std::vector<bool> planned(static_cast<std::size_t>(s.batch * s.max_chunks), false);
  std::vector<kernels::ScanChunk> row;
  for (index_t b = 0; b < s.batch; ++b) {
    kernels::plan_row_chunks(p.doc_ids.data() + b * s.seq, s.seq, s.chunk_size, row);
    for (std::size_t ci = 0; ci < row.size(); ++ci) planned[static_cast<std::size_t>(b * s.max_chunks) + ci] = true;
  }
  return planned;
}

// max |got - want| / max |want|, over the elements `keep` selects (all when it is empty), in double;
// the gradients as added into `before` (got - before against want - before).
double normwise_error(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& before = {},
                      const std::vector<bool>& keep = {}) {
  REQUIRE(got.size() == want.size());
  double error = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!keep.empty() && !keep[i]) continue;
    const double base = before.empty() ? 0.0 : before[i];
    const double g = got[i] - base, w = want[i] - base;
    error = std::max(error, std::isnan(g) ? INFINITY : std::abs(g - w));
    scale = std::max(scale, std::abs(w));
  }
  return scale > 0.0 ? error / scale : error;
}

// Runs the case on the emulator and on the CPU, prints each tensor's error and checks it.
void check_against_cpu(const char* name, const Case& c, std::uint64_t seed) {
  const ScanProblem& p = c.problem;
  const ScanRun initial = random_initial(p, seed);
  const ScanRun got = run_emulated_scan(p, initial), want = cpu_scan(c, initial);
  const ScanParams& s = p.sizes;
  // Every (b, h, ci, n, p) state element of a planned chunk.
  const std::vector<bool> planned = planned_chunks(p);
  std::vector<bool> state_kept(got.chunk_states.size());
  const auto NP = static_cast<std::size_t>(s.d_state * s.head_dim);
  for (std::size_t i = 0; i < state_kept.size(); ++i) {
    const std::size_t item = i / NP, ci = item % static_cast<std::size_t>(s.max_chunks),
                      b = item / static_cast<std::size_t>(s.heads * s.max_chunks);
    state_kept[i] = planned[b * static_cast<std::size_t>(s.max_chunks) + ci];
  }
  struct Compared {
    const char* what;
    double error;
  };
  const Compared compared[] = {
      {"y", normwise_error(got.y, want.y)},
      {"chunk_states", normwise_error(got.chunk_states, want.chunk_states, {}, state_kept)},
      {"dq", normwise_error(got.dq, want.dq, initial.dq)},
      {"dk", normwise_error(got.dk, want.dk, initial.dk)},
      {"dv", normwise_error(got.dv, want.dv, initial.dv)},
      {"dlog_alpha", normwise_error(got.dlog_alpha, want.dlog_alpha, initial.dlog_alpha)},
      {"dgamma", normwise_error(got.dgamma, want.dgamma, initial.dgamma)},
      {"dshift", normwise_error(got.dshift, want.dshift, initial.dshift)},
      {"dD", normwise_error(got.dD, want.dD, initial.dD)},
  };
  std::printf("emulated CUDA scan, %s:", name);
  for (const Compared& e : compared) std::printf(" %s %.1e", e.what, e.error);
  std::printf("\n");
  for (const Compared& e : compared) {
    INFO(name << ": " << e.what);
    CHECK(e.error <= kTolerance);
  }
}

bool bitwise_equal(const ScanRun& a, const ScanRun& b) {
  return same_bits(a.y, b.y) && same_bits(a.chunk_states, b.chunk_states) && same_bits(a.dq, b.dq) &&
         same_bits(a.dk, b.dk) && same_bits(a.dv, b.dv) && same_bits(a.dlog_alpha, b.dlog_alpha) &&
         same_bits(a.dgamma, b.dgamma) && same_bits(a.dshift, b.dshift) && same_bits(a.dD, b.dD);
}

}  // namespace

// Chunks of 4: documents start at tokens 3, 4, 10, 12 of row 0 (inside chunks of a fixed grid),
// the 6-, 7- and 9-token documents span two or three chunks, row 0 starts mid-document, 1-token
// documents.
TEST_CASE("emulated CUDA scan: Mamba-3 SISO, documents inside and across chunks, a row starting mid-document",
          "[scan]") {
  const Case c = make_case({{-3, 1, 6, 2, 9}, {7, 1, 4, 9}}, {2, 2, 1, 4, 3, 4, true, true}, 600);
  check_against_cpu("SISO", c, 601);
}

// N P = 320 state elements: more than a block's 256 threads, so threads own two elements and
// block_sum folds partial sums of unequal counts.
TEST_CASE("emulated CUDA scan: Mamba-3 MIMO rank 2, groups 1 < heads 2, a state larger than a block", "[scan]") {
  const Case c = make_case({{-2, 5, 1, 3, 7}, {4, 7, 7}}, {2, 1, 2, 16, 20, 3, true, true}, 610);
  check_against_cpu("MIMO rank 2", c, 611);
}

// The sums split into runs (SumSplit, detail/ssm/scan.cuh) at the Mamba-3 layer's head size (N 128,
// P 64: y's and dv's sums in 4 runs of 32 terms, dq's and dk's in 2), and sums with too many outputs
// for two runs each (R N = 160, R P = 140: one thread walks each whole sum).
TEST_CASE("emulated CUDA scan: sums split into runs at the layer's head size, and whole", "[scan]") {
  check_against_cpu("runs of 32", make_case({{-3, 6}, {9}}, {2, 1, 1, 128, 64, 4, true, true}, 670), 671);
  check_against_cpu("whole sums", make_case({{2, 5}, {7}}, {1, 1, 2, 80, 70, 4, true, true}, 680), 681);
}

TEST_CASE("emulated CUDA scan: MIMO rank 3 without D, chunk 2", "[scan]") {
  const Case c = make_case({{3, 1, 5}, {-4, 5}}, {2, 2, 3, 2, 2, 2, true, false}, 620);
  check_against_cpu("MIMO rank 3, no D", c, 621);
}

// A dD buffer given with no D (no skip connection): both backends leave it untouched, -0.0
// included. (CUDA added sum dy v, the gradient at D = 0, where the CPU added zeros.)
TEST_CASE("emulated CUDA scan: no D but a dD to add into: nothing is added, as on the CPU", "[scan]") {
  const Case c = make_case({{3, 1, 5}, {-4, 5}}, {2, 2, 1, 2, 2, 2, true, false}, 625);
  ScanRun initial = random_initial(c.problem, 626);
  Rng rng(627);
  initial.dD = normal(static_cast<std::size_t>(c.problem.sizes.heads), rng);
  initial.dD[0] = -0.0f;  // adding 0 would make it +0.0
  const ScanRun got = run_emulated_scan(c.problem, initial), want = cpu_scan(c, initial);
  CHECK(same_bits(got.dD, initial.dD));
  CHECK(same_bits(want.dD, initial.dD));
  CHECK(normwise_error(got.dv, want.dv, initial.dv) <= kTolerance);
}

// Padding (from_spans, doc id -1) before, between and after documents: each run of padding is a
// document of its own on both backends (starts_document), so the runs on either side of a
// document, which share the id -1, carry nothing into each other.
TEST_CASE("emulated CUDA scan: padding runs around documents", "[scan]") {
  const auto docs = DocumentLayout<Cpu>::from_spans(2, 16, {{{2, 5}, {9, 3}}, {{0, 4}, {6, 10}}});
  check_against_cpu("padding", make_case(docs, {2, 1, 1, 4, 3, 4, true, true}, 690), 691);
}

TEST_CASE("emulated CUDA scan: Mamba-2 SSD (no shift), groups 2 < heads 4, batch 3", "[scan]") {
  const Case c = make_case({{1, 9, 1, 5}, {-5, 6, 5}, {16}}, {4, 2, 1, 3, 2, 4, false, true}, 630);
  check_against_cpu("Mamba-2 SSD", c, 631);
}

// The kernel cases' long documents (40, 70, 39 tokens) in chunks of 64, P = 17; a 120-token document
// (two chunks) after a row's 30-token start. [large]: 64 barrier pairs per block, slow under ASan.
TEST_CASE("emulated CUDA scan: long documents in chunks of 64, MIMO rank 2", "[scan][large]") {
  const Case c = make_case({{1, 40, 70, 39}, {-30, 120}}, {2, 1, 2, 8, 17, 64, true, true}, 640);
  check_against_cpu("long documents", c, 641);
}

// 408 chunk items (2 rows, 4 heads, 51 chunks): more than the forward's (396) and the backward's
// (264) per-chunk blocks, so blocks loop over items and reuse their scratch. [large]: hundreds of
// blocks per launch, slow under ASan.
TEST_CASE("emulated CUDA scan: more chunk items than the per-chunk launches' blocks", "[scan][large]") {
  const Case c = make_case({{-7, 100, 93}, {200}}, {4, 2, 1, 2, 2, 4, true, true}, 650);
  REQUIRE(c.problem.sizes.batch * c.problem.sizes.heads * c.problem.sizes.max_chunks > 396);
  check_against_cpu("more items than blocks", c, 651);
}

TEST_CASE("emulated CUDA scan: bitwise the same from run to run and under every schedule", "[scan]") {
  const Case c = make_case({{-2, 5, 1, 3, 7}, {4, 7, 7}}, {2, 1, 2, 16, 20, 3, true, true}, 660);
  const ScanRun initial = random_initial(c.problem, 661);
  const ScanRun first = run_emulated_scan(c.problem, initial);
  CHECK(bitwise_equal(first, run_emulated_scan(c.problem, initial)));
  for (const bool reverse : {true, false}) {
    Options o;
    (reverse ? o.reverse_schedule : o.greedy_schedule) = true;
    const OptionsScope scope(o);
    INFO((reverse ? "reversed" : "greedy") << " schedule");
    CHECK(bitwise_equal(first, run_emulated_scan(c.problem, initial)));
  }
}

// Document 2 of row 0 (tokens 5 .. 10, spanning chunks) gets new inputs and a new dy: every other
// token's y and gradients, and every other document's chunk states, keep their bits.
TEST_CASE("emulated CUDA scan: one document's inputs leave the other documents' outputs bitwise unchanged", "[scan]") {
  const Case c = make_case({{-2, 3, 6, 4}, {5, 10}}, {2, 1, 2, 4, 3, 4, true, true}, 670);
  const ScanParams& s = c.problem.sizes;
  const index_t first = 5, last = 11;  // row 0's tokens [first, last): document 2
  Case changed = c;
  Rng rng(672);
  auto redraw = [&](std::vector<float>& x, index_t per_token) {
    for (index_t i = first * per_token; i < last * per_token; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(rng.normal());
  };
  ScanProblem& p = changed.problem;
  redraw(p.q, s.groups * s.rank * s.d_state);
  redraw(p.k, s.groups * s.rank * s.d_state);
  redraw(p.v, s.heads * s.rank * s.head_dim);
  redraw(p.dy, s.heads * s.rank * s.head_dim);
  for (index_t i = first * s.heads; i < last * s.heads; ++i) {
    const auto at = static_cast<std::size_t>(i);
    p.log_alpha[at] = static_cast<float>(rng.uniform(-0.9, -0.05));
    p.gamma[at] = static_cast<float>(rng.uniform(0.05, 0.6));
    p.shift[at] = static_cast<float>(rng.uniform(0.05, 0.6));
  }
  const ScanRun initial = random_initial(c.problem, 671);
  const ScanRun a = run_emulated_scan(c.problem, initial), b = run_emulated_scan(changed.problem, initial);
  // Per-token tensors: elements of tokens outside [first, last) of row 0 (token index = element / width).
  auto unchanged_outside = [&](const std::vector<float>& x, const std::vector<float>& y, index_t width) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      const index_t token = static_cast<index_t>(i) / width;
      if (token >= first && token < last) continue;
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return false;
    }
    return true;
  };
  CHECK(!same_bits(a.y, b.y));  // the change reaches its own document
  CHECK(unchanged_outside(a.y, b.y, s.heads * s.rank * s.head_dim));
  CHECK(unchanged_outside(a.dq, b.dq, s.heads * s.rank * s.d_state));
  CHECK(unchanged_outside(a.dk, b.dk, s.heads * s.rank * s.d_state));
  CHECK(unchanged_outside(a.dv, b.dv, s.heads * s.rank * s.head_dim));
  CHECK(unchanged_outside(a.dlog_alpha, b.dlog_alpha, s.heads));
  CHECK(unchanged_outside(a.dgamma, b.dgamma, s.heads));
  CHECK(unchanged_outside(a.dshift, b.dshift, s.heads));
  // Chunk states of every chunk but document 2's: row 0's chunks are [0, 2), [2, 5), [5, 9), [9, 11), [11, 15).
  const auto NP = static_cast<std::size_t>(s.d_state * s.head_dim);
  for (index_t h = 0; h < s.heads; ++h)
    for (index_t ci : {0, 1, 4}) {
      const auto at = static_cast<std::size_t>(h * s.max_chunks + ci) * NP;
      INFO("row 0, head " << h << ", chunk " << ci);
      CHECK(std::memcmp(&a.chunk_states[at], &b.chunk_states[at], NP * sizeof(float)) == 0);
    }
  const auto row1 = static_cast<std::size_t>(s.heads * s.max_chunks) * NP;
  CHECK(std::memcmp(&a.chunk_states[row1], &b.chunk_states[row1], row1 * sizeof(float)) == 0);
}

}  // namespace megacpp::cuda_emulation
