// tests/cuda_emulation/test_attention_mma.cpp: the bf16 tensor-core attention (detail/attention_mma.cuh),
// unmodified device code on the host emulation, on every case of tests/cuda/attention_bf16_cases.hpp
// with the GPU test's seeds: o, lse, dq, dk, dv against the double reference within the GPU
// test's tolerances; padding tokens exact; the same bits again under another thread schedule (greedy,
// reversed: no race). Cases
// tagged [large] are left out under the sanitizers (tests/cuda_emulation/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <cstdio>

#include "attention_checks.hpp"
#include "emulator/options.hpp"

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

TEST_CASE("the case list is the one the tests above cover", "[attention_mma]") {
  CHECK(attention_bf16_test::problems().size() == 7);
}

}  // namespace megacpp::cuda_emulation
