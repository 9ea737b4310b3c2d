// tests/cuda_emulation/test_faults.cpp: the emulator catches realistic bugs in the bf16 attention.
// Each fault is injected through the shims or the emulated launch (the device code stays as it
// is), on a small problem, and must end in an EmulationError or in results the case checks reject.
#include <catch2/catch.hpp>

#include <string>

#include "attention_checks.hpp"
#include "device_lines.hpp"
#include "emulator/device.hpp"
#include "emulator/options.hpp"
#include "emulator/sanitizer.hpp"

using Catch::Matchers::Contains;

namespace megacpp::cuda_emulation {
namespace {

// Two query tiles in one document, a short second document, padding at the end.
Problem fault_probe() {
  return {"fault probe: d64, MHA 2:2, documents of 70 and 20, padding", 1, 100, 2, 2, 64, {attention_bf16_test::packed({70, 20})}};
}

// What a run under `o` and `faults` gives: "error: <the emulator's message>", "wrong: <why>", or "right".
std::string outcome(const Options& o, const LaunchFaults& faults = {}) {
  const Problem p = fault_probe();
  const Inputs raw = attention_bf16_test::make_inputs(p, 11);
  const AttentionRun initial = random_initial(p, 12);
  AttentionRun got;
  try {
    const OptionsScope scope(o);
    got = run_bf16_attention(p, raw, initial, faults);
  } catch (const EmulationError& e) {
    return std::string("error: ") + e.what();
  }
  const Errors e = errors(p, attention_bf16_test::rounded(raw), got, initial);
  if (!(e.o <= attention_bf16_test::kOutputTolerance && e.lse <= attention_bf16_test::kLseTolerance &&
        e.dq <= attention_bf16_test::kGradientTolerance && e.dk <= attention_bf16_test::kGradientTolerance &&
        e.dv <= attention_bf16_test::kGradientTolerance))
    return "wrong: errors o " + std::to_string(e.o) + ", lse " + std::to_string(e.lse) + ", dq " + std::to_string(e.dq) +
           ", dk " + std::to_string(e.dk) + ", dv " + std::to_string(e.dv);
  if (std::string why = check_padding(p, got, initial); !why.empty()) return "wrong: " + why;
  return "right";
}

}  // namespace

TEST_CASE("the fault probe passes without faults", "[faults]") { CHECK(outcome({}) == "right"); }

TEST_CASE("faults injected into the bf16 attention are caught", "[faults]") {
  Options o;
  // Each thread's cp.async copies land at its own wait; without the barrier after it, a warp reads
  // rows that other threads copy before their copies have landed, or lets its next copies land
  // on a tile other warps still read. Only a warp running ahead shows it: the round-robin
  // schedule keeps the warps together, so these run under the greedy one.
  SECTION("every thread skips its first __syncthreads (Q and the first K, V copied -> S = Q K^T reads them)") {
    o.skip_barrier = 0;
    o.greedy_schedule = true;
    CHECK_THAT(outcome(o), Contains("wrong"));
  }
  SECTION("every thread skips the barrier at the start of every step") {
    o.skip_barrier_line = device_line("attention_mma.cuh", "ptx::cp_async_wait<0>();");
    REQUIRE(o.skip_barrier_line > 0);
    o.skip_barrier_line += 1;  // the __syncthreads on the line after the wait
    o.greedy_schedule = true;
    CHECK_THAT(outcome(o), Contains("wrong"));
  }
  SECTION("one lane's ldmatrix row address 16 bytes off") {
    o.ldmatrix_address_shift = 16;
    o.ldmatrix_fault_lane = 5;
    CHECK_THAT(outcome(o), Contains("wrong") || Contains("past the"));
  }
  SECTION("ldmatrix row addresses 8 bytes off (not 16-byte aligned)") {
    o.ldmatrix_address_shift = 8;
    CHECK_THAT(outcome(o), Contains("error") && Contains("not 16-byte aligned"));
  }
#if !defined(MEGACPP_EMULATION_ASAN)  // under ASan the bytes past the request are poisoned: it aborts at the write
  SECTION("the launch requests 256 bytes less dynamic shared memory than the kernel's plan") {
    CHECK_THAT(outcome(o, {.shared_shortfall = 256}), Contains("error") && Contains("past the"));
  }
#endif
}

}  // namespace megacpp::cuda_emulation
