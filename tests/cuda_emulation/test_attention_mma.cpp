// tests/cuda_emulation/test_attention_mma.cpp: the bf16 tensor-core attention (detail/attention_mma.cuh),
// unmodified device code on the host emulation, on every case of tests/cuda/attention_bf16_cases.hpp
// with the GPU test's seeds: o, lse, dq, dk, dv against the double reference within the GPU
// test's tolerances; padding tokens exact; the same bits again under another thread schedule (greedy,
// reversed: no race). Cases
// tagged [large] are left out under the sanitizers (tests/cuda_emulation/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attention_checks.hpp"
#define MEGACPP_CUDA_BACKEND_INTERNAL  // as device_code.hpp: the work lists under test
#include "megacpp/backends/cuda/detail/attention.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL
#include "emulator/options.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::cuda_emulation {
namespace {

void check_case(std::size_t index) {
  const Problem p = attention_bf16_test::problems()[index];
  INFO("case " << index << ": " << p.name);
  const std::uint64_t seed = 500 + index;  // as tests/cuda/test_cuda_backend.cu
  const Inputs raw = attention_bf16_test::make_inputs(p, seed);
  const AttentionRun initial = random_initial(p, seed + 1);
  const AttentionRun got = run_bf16_attention(p, raw, initial);
  const Errors e = errors(p, attention_bf16_test::rounded(raw), got, initial);
  std::printf("bf16 attention case %zu: o %.2e  lse %.2e  dq %.2e  dk %.2e  dv %.2e  (%s)\n", index, e.o, e.lse, e.dq, e.dk,
              e.dv, p.name.c_str());
  CHECK(e.o <= attention_bf16_test::kOutputTolerance);
  CHECK(e.lse <= attention_bf16_test::kLseTolerance);
  CHECK(e.dq <= attention_bf16_test::kGradientTolerance);
  CHECK(e.dk <= attention_bf16_test::kGradientTolerance);
  CHECK(e.dv <= attention_bf16_test::kGradientTolerance);
  CHECK(check_padding(p, got, initial).empty());
  Options other;  // threads from the last, each warp as far ahead as it can go
  other.reverse_schedule = true;
  other.greedy_schedule = true;
  const OptionsScope scope(other);
  CHECK(bitwise_equal(got, run_bf16_attention(p, raw, initial)));
}

}  // namespace

TEST_CASE("emulated bf16 attention, case 0: d64, GQA 4:2, documents 37, 1, 150, 12 | 70, 130", "[attention_mma]") {
  check_case(0);
}
TEST_CASE("emulated bf16 attention, case 1: d128, window 40, softcap 30", "[attention_mma][large]") { check_case(1); }
TEST_CASE("emulated bf16 attention, case 2: d128, padding between documents, scale 0.2", "[attention_mma][large]") {
  check_case(2);
}
TEST_CASE("emulated bf16 attention, case 3: d50 (scalar loads), GQA 4:1, window 100, softcap 5", "[attention_mma]") {
  check_case(3);
}
TEST_CASE("emulated bf16 attention, case 4: d80, GQA 2:1, padding at the end", "[attention_mma]") { check_case(4); }
TEST_CASE("emulated bf16 attention, case 5: d8, 8 documents of 20", "[attention_mma]") { check_case(5); }
TEST_CASE("emulated bf16 attention, case 6: d32, window 7, softcap 2", "[attention_mma]") { check_case(6); }

// The dK/dV pass with a kv head's query heads split across blocks (key_value_splits, as the launch
// code splits when the device holds more blocks than the pass has): dK, dV within the tolerances,
// padding exact, the same bits under another schedule; o, lse and dQ the unsplit run's bits; with
// only dV wanted, dK untouched. Each split count up to the case's query heads per kv head.
namespace {
void check_split_case(std::size_t index) {
  const Problem p = attention_bf16_test::problems()[index];
  const std::uint64_t seed = 500 + index;
  const Inputs raw = attention_bf16_test::make_inputs(p, seed);
  const AttentionRun initial = random_initial(p, seed + 1);
  const AttentionRun unsplit = run_bf16_attention(p, raw, initial);
  const index_t group = p.heads / p.kv_heads, blocks = key_value_blocks(p);
  for (index_t splits = 2; splits <= group; splits *= 2) {
    INFO("case " << index << " (" << p.name << "), " << splits << " splits");
    const index_t resident = blocks * splits;  // the fewest splits that fill it: `splits`
    REQUIRE(key_value_splits(p, resident) == splits);
    const AttentionRun got = run_bf16_attention(p, raw, initial, {}, {}, resident);
    const Errors e = errors(p, attention_bf16_test::rounded(raw), got, initial);
    std::printf("bf16 attention case %zu, %lld splits: dk %.2e  dv %.2e\n", index, static_cast<long long>(splits), e.dk,
                e.dv);
    CHECK(e.dk <= attention_bf16_test::kGradientTolerance);
    CHECK(e.dv <= attention_bf16_test::kGradientTolerance);
    CHECK(check_padding(p, got, initial).empty());
    CHECK(got.o == unsplit.o);
    CHECK(got.lse == unsplit.lse);
    CHECK(got.dq == unsplit.dq);
    const AttentionRun only_v = run_bf16_attention(p, raw, initial, {}, {.q = false, .k = false, .v = true}, resident);
    CHECK(only_v.dk == initial.dk);
    CHECK(only_v.dv == got.dv);
    Options other;
    other.reverse_schedule = true;
    other.greedy_schedule = true;
    const OptionsScope scope(other);
    CHECK(bitwise_equal(got, run_bf16_attention(p, raw, initial, {}, {}, resident)));
  }
}

}  // namespace

// Case 3 (GQA 4:1) in 2 and in 4 splits, under the sanitizers too; cases 0 and 4 (groups of 2) in 2,
// [large]: together twice case 3's time under ASan, for no split count case 3 leaves out.
TEST_CASE("emulated bf16 attention: dK/dV with each kv head's query heads split across blocks (GQA 4:1)",
          "[attention_mma]") {
  check_split_case(3);
}
TEST_CASE("emulated bf16 attention: dK/dV with each kv head's query heads split across blocks (groups of 2)",
          "[attention_mma][large]") {
  check_split_case(0);
  check_split_case(4);
}

// Gradients not asked for are null pointers (the kernel contract): they stay untouched, and the
// others are the same bits as when all three are asked for.
TEST_CASE("emulated bf16 attention: dK or dV alone, dQ skipped", "[attention_mma]") {
  const Problem p = attention_bf16_test::problems()[0];
  const Inputs raw = attention_bf16_test::make_inputs(p, 500);
  const AttentionRun initial = random_initial(p, 501);
  const AttentionRun all = run_bf16_attention(p, raw, initial);
  const AttentionRun only_v = run_bf16_attention(p, raw, initial, {}, {.q = false, .k = false, .v = true});
  CHECK(only_v.dq == initial.dq);
  CHECK(only_v.dk == initial.dk);
  CHECK(only_v.dv == all.dv);
  const AttentionRun k_and_q = run_bf16_attention(p, raw, initial, {}, {.q = true, .k = true, .v = false});
  CHECK(k_and_q.dq == all.dq);
  CHECK(k_and_q.dk == all.dk);
  CHECK(k_and_q.dv == initial.dv);
}

// The copies every kernel reads (to_bf16_rows_kernel): each element rounded to nearest even, as
// megacpp::bf16 rounds on the host, bit for bit; zero columns from dim to the next multiple of 8;
// the same bits through the float4 loads (dim a multiple of 4, src 16-byte aligned) and the scalar
// ones (any other dim, or a src one float off the alignment).
TEST_CASE("the bf16 copies of q, k, v and dO round each element to nearest even and pad with zeros",
          "[attention_mma]") {
  Rng rng(77);
  for (const index_t dim : {1, 3, 8, 50, 64, 100, 128}) {
    for (const index_t offset : {0, 1}) {
      const index_t rows = 37, width = (dim + 7) / 8 * 8;
      std::vector<float> storage(static_cast<std::size_t>(rows * dim + 4));
      for (float& x : storage) x = static_cast<float>(rng.normal()) * 3.0f;
      storage[static_cast<std::size_t>(offset)] = 1.0f + 1.0f / 256.0f;  // a tie: rounds to even (1.0)
      const float* src = storage.data() + offset;
      INFO("dim " << dim << ", src offset " << offset << " floats");
      const std::vector<std::uint16_t> got = emulated_bf16_rows(src, rows, dim);
      REQUIRE(got.size() == static_cast<std::size_t>(rows * width));
      int wrong = 0;
      for (index_t r = 0; r < rows; ++r)
        for (index_t e = 0; e < width; ++e) {
          const std::uint16_t want = e < dim ? bf16(src[r * dim + e]).bits : std::uint16_t{0};
          wrong += got[static_cast<std::size_t>(r * width + e)] != want;
        }
      CHECK(wrong == 0);
      CHECK(got[0] == bf16(1.0f).bits);
    }
  }
}

// The backward's first pass (grad_output_rows_kernel): dO's copy has the bits to_bf16_rows_kernel
// gives (each element rounded to nearest even, zero padding), on both load paths, and
// D = rowsum(bf16(dO) o O) is the double sum of the rounded dO times O to fp32 rounding; an odd
// row count leaves the second half-warp of the last pair without a row.
TEST_CASE("the backward's dO copy and D come from one pass: the copy's bits, D to fp32 rounding",
          "[attention_mma]") {
  Rng rng(78);
  for (const index_t dim : {1, 8, 50, 64, 100, 128}) {
    for (const index_t offset : {0, 1}) {
      const index_t rows = 37;
      std::vector<float> grad_storage(static_cast<std::size_t>(rows * dim + 4)), o_storage(grad_storage.size());
      for (float& x : grad_storage) x = static_cast<float>(rng.normal()) * 3.0f;
      for (float& x : o_storage) x = static_cast<float>(rng.normal());
      const float *grad_o = grad_storage.data() + offset, *o = o_storage.data() + offset;
      INFO("dim " << dim << ", offset " << offset << " floats");
      const GradOutputRowsRun got = emulated_grad_output_rows(grad_o, o, rows, dim);
      CHECK(got.grad_o_bits == emulated_bf16_rows(grad_o, rows, dim));
      double worst = 0;
      for (index_t r = 0; r < rows; ++r) {
        double want = 0, scale = 0;
        for (index_t e = 0; e < dim; ++e) {
          const double term = static_cast<double>(static_cast<float>(bf16(grad_o[r * dim + e]))) * o[r * dim + e];
          want += term;
          scale += std::abs(term);
        }
        worst = std::max(worst, std::abs(got.drow[static_cast<std::size_t>(r)] - want) / std::max(scale, 1e-30));
      }
      CHECK(worst < 1e-6);
    }
  }
}

// The kernels' work lists (TileOrder, detail/attention.cuh): each a permutation of the document
// order; query tiles (forward, dQ) by decreasing tile index, the key tiles they visit; key tiles
// (dK/dV) by decreasing tiles after them in their document, the query tiles that see them; ties
// in document order.
TEST_CASE("the bf16 kernels' work lists start the heaviest tiles first, each tile once", "[attention_mma]") {
  namespace flash = cuda::flash;
  const std::vector<std::vector<DocumentSpan>> spans{{{0, 200}, {200, 64}, {264, 1}}, {{0, 3}, {10, 400}, {410, 65}}};
  const index_t rows = 64;
  const std::vector<flash::WorkTile> documents = flash::document_tiles(spans, rows);
  REQUIRE(documents.size() == 4 + 1 + 1 + 1 + 7 + 2);
  auto place = [&](const flash::WorkTile& w) {  // index in document order
    for (std::size_t i = 0; i < documents.size(); ++i)
      if (documents[i].b == w.b && documents[i].start == w.start && documents[i].tile == w.tile) return i;
    return documents.size();
  };
  for (const flash::TileOrder order : {flash::TileOrder::late_queries_first, flash::TileOrder::early_keys_first}) {
    const std::vector<flash::WorkTile> list = flash::document_tiles(spans, rows, order);
    INFO("order " << static_cast<int>(order));
    auto work = [&](const flash::WorkTile& w) {
      return order == flash::TileOrder::late_queries_first ? w.tile + 1 : (w.len + rows - 1) / rows - w.tile;
    };
    std::vector<int> seen(documents.size(), 0);
    for (const flash::WorkTile& w : list) {
      REQUIRE(place(w) < documents.size());
      ++seen[place(w)];
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    for (std::size_t i = 1; i < list.size(); ++i) {
      CHECK(work(list[i - 1]) >= work(list[i]));
      if (work(list[i - 1]) == work(list[i])) CHECK(place(list[i - 1]) < place(list[i]));
    }
  }
  CHECK(flash::document_tiles(spans, rows, flash::TileOrder::late_queries_first).front().tile == 6);
  const flash::WorkTile last = flash::document_tiles(spans, rows, flash::TileOrder::early_keys_first).back();
  CHECK((last.b == 1 && last.start == 410 && last.tile == 1));  // the last of the one-tile-after ties
}

TEST_CASE("the case list is the one the tests above cover", "[attention_mma]") {
  CHECK(attention_bf16_test::problems().size() == 7);
}

}  // namespace megacpp::cuda_emulation
