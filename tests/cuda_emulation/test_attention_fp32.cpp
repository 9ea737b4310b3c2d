// tests/cuda_emulation/test_attention_fp32.cpp: the fp32 CUDA-core attention (detail/attention.cuh)
// on the same emulation and cases, against the same double reference on the unrounded inputs
// (exact P and dS: what an fp32 kernel computes), and bitwise under the reversed schedule.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "attention_checks.hpp"
#include "emulator/options.hpp"

namespace megacpp::cuda_emulation {

namespace {

// One problem against the reference (errors within kTolerance, padding untouched) and bitwise the
// same under the reversed schedule.
void check_fp32_case(const Problem& p, std::uint64_t seed) {
  constexpr double kTolerance = 1e-4;  // fp32 sums of a few hundred terms, relative to each tensor's max
  INFO(p.name);
  const Inputs raw = attention_bf16_test::make_inputs(p, seed);
  const AttentionRun initial = random_initial(p, seed + 1);
  const AttentionRun got = run_fp32_attention(p, raw, initial);
  const Errors e = errors(p, raw, got, initial);
  std::printf("fp32 attention, %s: o %.2e  lse %.2e  dq %.2e  dk %.2e  dv %.2e\n", p.name.c_str(), e.o, e.lse, e.dq,
              e.dk, e.dv);
  CHECK(e.o <= kTolerance);
  CHECK(e.lse <= kTolerance);
  CHECK(e.dq <= kTolerance);
  CHECK(e.dk <= kTolerance);
  CHECK(e.dv <= kTolerance);
  CHECK(check_padding(p, got, initial).empty());
  Options reversed;
  reversed.reverse_schedule = true;
  const OptionsScope scope(reversed);
  CHECK(bitwise_equal(got, run_fp32_attention(p, raw, initial)));
}

}  // namespace

TEST_CASE("emulated fp32 attention on the bf16 cases with head_dim up to 64", "[attention_fp32]") {
  const std::vector<Problem> problems = attention_bf16_test::problems();
  for (std::size_t index : {0, 3, 5, 6}) check_fp32_case(problems[index], 500 + index);
}

// The row layouts of wider heads (with_row_layout: 4 lanes a row up to 128, 8 up to 256): head_dim
// 80 and 128 from the bf16 cases (padding between and after documents), and 200 (the widest
// layout, a dim not a multiple of 4: scalar loads) with GQA and a window.
TEST_CASE("emulated fp32 attention with head_dim 80, 128 and 200", "[attention_fp32]") {
  const std::vector<Problem> problems = attention_bf16_test::problems();
  check_fp32_case(problems[4], 520);
  check_fp32_case(problems[2], 530);
  const Problem wide{"d200, GQA 2:1, window 50, 2 rows: documents of 70, 1, 29; 100", 2, 100, 2, 1, 200,
                     {attention_bf16_test::packed({70, 1, 29}), attention_bf16_test::packed({100})}, 0.0, 0.0, 50};
  check_fp32_case(wide, 540);
}

// Gradients not asked for are null pointers (the kernel contract): they stay untouched, and the
// others are the same bits as when all three are asked for (a GQA case: dK/dV sum query heads).
TEST_CASE("emulated fp32 attention: dK or dV alone, dQ skipped", "[attention_fp32]") {
  const Problem p = attention_bf16_test::problems()[0];
  const Inputs raw = attention_bf16_test::make_inputs(p, 500);
  const AttentionRun initial = random_initial(p, 501);
  const AttentionRun all = run_fp32_attention(p, raw, initial);
  const AttentionRun only_v = run_fp32_attention(p, raw, initial, {.q = false, .k = false, .v = true});
  CHECK(only_v.dq == initial.dq);
  CHECK(only_v.dk == initial.dk);
  CHECK(only_v.dv == all.dv);
  const AttentionRun k_and_q = run_fp32_attention(p, raw, initial, {.q = true, .k = true, .v = false});
  CHECK(k_and_q.dq == all.dq);
  CHECK(k_and_q.dk == all.dk);
  CHECK(k_and_q.dv == initial.dv);
}

}  // namespace megacpp::cuda_emulation
