// LR schedules: absolute warmup, then constant / cosine / linear / warmup-stable-decay, checked
// at steps 0, warmup - 1, warmup, the middle and the end; Muon momentum warmup 0.85 -> 0.95.
#include <cmath>

#include "optim_testing.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;
using optim::LrSchedule;

TEST_CASE("warmup is linear over an absolute step count: (step + 1) / W", "[optim][schedule]") {
  for (const LrSchedule& s : {LrSchedule::constant(100), LrSchedule::cosine(100, 1000, 0.1), LrSchedule::linear(100, 1000),
                              LrSchedule::wsd(100, 1000, 200)}) {
    INFO(optim::decay_name(s.options().decay));
    CHECK(s(0) == 0.01);   // step 0: 1 / W, never 0 (a step at lr 0 is wasted)
    CHECK(s(49) == 0.5);
    CHECK(s(99) == 1.0);   // W - 1: the full lr
    CHECK(s(100) == 1.0);  // W: decay starts from 1
  }
  CHECK(LrSchedule::constant(0)(0) == 1.0);
  CHECK(LrSchedule::cosine(0, 10)(0) == 1.0);
}

TEST_CASE("decays after warmup: values at the middle and the end", "[optim][schedule]") {
  const LrSchedule cosine = LrSchedule::cosine(100, 1000, 0.1);
  CHECK(cosine(550) == Approx(0.1 + 0.9 * 0.5).epsilon(1e-15));  // half way: cos(pi / 2) = 0
  CHECK(cosine(325) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4))).epsilon(1e-15));
  CHECK(cosine(1000) == Approx(0.1).epsilon(1e-15));  // end: final_ratio
  CHECK(cosine(5000) == Approx(0.1).epsilon(1e-15));  // after the end: stays there
  const LrSchedule linear = LrSchedule::linear(100, 1000);
  CHECK(linear(550) == 0.5);
  CHECK(linear(1000) == 0.0);
  const LrSchedule constant = LrSchedule::constant(100);
  CHECK(constant(1000000) == 1.0);
  const LrSchedule wsd = LrSchedule::wsd(100, 1000, 200, 0.0);
  CHECK(wsd(500) == 1.0);  // stable
  CHECK(wsd(800) == 1.0);  // decay starts at T - D
  CHECK(wsd(900) == 0.5);
  CHECK(wsd(1000) == 0.0);
  CHECK(wsd(999) == Approx(0.005).epsilon(1e-12));
}

TEST_CASE("schedules reject inconsistent settings with the values", "[optim][schedule]") {
  CHECK_THROWS_WITH(LrSchedule::cosine(500, 500), Contains("total 500") && Contains("warmup 500"));
  CHECK_THROWS_WITH(LrSchedule::wsd(100, 1000, 950), Contains("decay 950"));
  CHECK_THROWS_WITH(LrSchedule::constant(-1), Contains("-1"));
  CHECK_THROWS_WITH(LrSchedule::linear(10, 100, 1.5), Contains("1.5"));
  CHECK_THROWS_WITH(LrSchedule::constant(10)(-3), Contains("-3"));
  // A ratio does not compile: LrSchedule::cosine(0.1, 1000) fails with
  // "megacpp_warmup_is_absolute_steps" (static_assert in schedule.hpp).
}

TEST_CASE("Muon momentum warmup goes 0.85 -> 0.95 linearly over its steps", "[optim][schedule]") {
  const optim::MomentumWarmup w{};  // 0.85 -> 0.95 over 300 steps (modded-nanogpt)
  CHECK(w(0) == 0.85);
  CHECK(w(150) == Approx(0.90).epsilon(1e-15));
  CHECK(w(299) == Approx(0.85 + 0.1 * 299.0 / 300.0).epsilon(1e-15));
  CHECK(w(300) == 0.95);
  CHECK(w(100000) == 0.95);
  CHECK(optim::MomentumWarmup{.from = 0.85, .to = 0.95, .steps = 0}(0) == 0.95);
}
