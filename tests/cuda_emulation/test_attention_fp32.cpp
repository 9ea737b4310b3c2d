// tests/cuda_emulation/test_attention_fp32.cpp: the fp32 CUDA-core attention (detail/attention.cuh)
// on the same emulation and cases, against the same double reference on the unrounded inputs
// (exact P and dS: what an fp32 kernel computes), and bitwise under the reversed schedule.
#include <catch2/catch.hpp>

#include <cstdio>

#include "attention_checks.hpp"
#include "emulator/options.hpp"

namespace megacpp::cuda_emulation {

TEST_CASE("emulated fp32 attention on the bf16 cases with head_dim up to 64", "[attention_fp32]") {
  constexpr double kTolerance = 1e-4;  // fp32 sums of a few hundred terms, relative to each tensor's max
  const std::vector<Problem> problems = attention_bf16_test::problems();
  for (std::size_t index : {0, 3, 5, 6}) {
    const Problem& p = problems[index];
    INFO("case " << index << ": " << p.name);
    const Inputs raw = attention_bf16_test::make_inputs(p, 500 + index);
    const AttentionRun initial = random_initial(p, 501 + index);
    const AttentionRun got = run_fp32_attention(p, raw, initial);
    const Errors e = errors(p, raw, got, initial);
    std::printf("fp32 attention case %zu: o %.2e  lse %.2e  dq %.2e  dk %.2e  dv %.2e\n", index, e.o, e.lse, e.dq, e.dk, e.dv);
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
}

}  // namespace megacpp::cuda_emulation
