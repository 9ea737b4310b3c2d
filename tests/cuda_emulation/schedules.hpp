// tests/cuda_emulation/schedules.hpp: the check that an emulated kernel has no race the schedule
// could expose: the same bits run to run, and under the reversed and greedy schedules
// (emulator/options.hpp). For Catch2 tests.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>

#include "emulator/options.hpp"
#include "host_arrays.hpp"

namespace megacpp::cuda_emulation {

/// run() returns the outputs (a vector of host arrays) of one emulated run under the current
/// options. Runs it under the default schedule, then again under that one, the reversed one and the
/// greedy one, checking each time the same bits as the first.
template <class Run>
void check_same_bits_under_schedules(const Run& run) {
  const auto want = run();
  for (int other : {0, 1, 2}) {  // the same schedule again, the reversed one, the greedy one
    Options schedule = options();
    schedule.reverse_schedule = other == 1;
    schedule.greedy_schedule = other == 2;
    const OptionsScope scope(schedule);
    const auto got = run();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(same_bits(got[i], want[i]));
  }
}

}  // namespace megacpp::cuda_emulation
