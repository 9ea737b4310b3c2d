// tests/cuda_emulation/test_faults.cpp: the emulator catches realistic bugs in the bf16 attention.
// Each fault is injected through the shims or the emulated launch (the device code stays as it
// is), on a small problem, and must end in an EmulationError or in results the case checks reject.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "attention_checks.hpp"
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

// The line of detail/attention_mma.cuh that contains `text` (0 if none).
unsigned device_line(const std::string& text) {
  std::ifstream file(MEGACPP_EMULATION_DEVICE_DIR "/attention_mma.cuh");
  std::string line;
  for (unsigned n = 1; std::getline(file, line); ++n)
    if (line.find(text) != std::string::npos) return n;
  return 0;
}

}  // namespace

TEST_CASE("the fault probe passes without faults", "[faults]") { CHECK(outcome({}) == "right"); }

TEST_CASE("faults injected into the bf16 attention are caught", "[faults]") {
  Options o;
  SECTION("every thread skips its second __syncthreads (K, V staged -> S = Q K^T)") {
    o.skip_barrier = 1;
    CHECK_THAT(outcome(o), Contains("wrong"));
  }
  SECTION("every lane skips its first __syncwarp (S stored -> the softmax reads its rows)") {
    o.skip_syncwarp = 0;
    CHECK_THAT(outcome(o), Contains("wrong"));
  }
  SECTION("the dK/dV kernel's last __syncthreads (tiles read -> their memory takes the gradient strips)") {
    // A race only a warp running ahead shows: with it skipped, warp 0 stores its dK strip over K
    // rows that warp 1 has yet to read. The round-robin schedule keeps the warps together.
    o.skip_barrier_line = device_line("every warp is done with the tiles: their memory holds the gradient strips now");
    REQUIRE(o.skip_barrier_line > 0);
    o.greedy_schedule = true;
    CHECK_THAT(outcome(o), Contains("wrong"));
  }
  SECTION("one lane skips a __syncwarp") {
    o.skip_syncwarp = 0;
    o.skip_syncwarp_lane = 5;
    CHECK_THAT(outcome(o), Contains("error") && Contains("divergent warp collectives"));
  }
  SECTION("a WMMA load pointer 16 bytes off") {
    o.wmma_pointer_shift = 16;
    CHECK_THAT(outcome(o), Contains("error") && Contains("not 256-bit"));
  }
  SECTION("a WMMA load with ldm 4 elements more (not a multiple of 8 bf16)") {
    o.wmma_ldm_shift = 4;
    CHECK_THAT(outcome(o), Contains("error") && Contains("not a multiple of 8"));
  }
#if !defined(MEGACPP_EMULATION_ASAN)  // under ASan the bytes past the request are poisoned: it aborts at the write
  SECTION("the launch requests 256 bytes less dynamic shared memory than the kernel's plan") {
    CHECK_THAT(outcome(o, {.shared_shortfall = 256}), Contains("error") && Contains("past the"));
  }
#endif
}

}  // namespace megacpp::cuda_emulation
