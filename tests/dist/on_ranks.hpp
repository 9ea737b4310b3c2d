// Shared by the in-process communicator tests: on_ranks(world, body) runs body(comm) on every
// rank of an in-process world on its own thread, rethrows the first failure and returns what each
// rank's body returned, in rank order. Catch2's assertion macros are not thread-safe (a CHECK or
// INFO on a rank's thread races on Catch's shared message streams; ASan caught one), so bodies
// compute and return, and the test checks their results on its own thread.
#pragma once

#include <exception>
#include <thread>
#include <type_traits>
#include <vector>

#include "megacpp/dist/in_process.hpp"

namespace megacpp::testing {

// Runs body(comm) on every rank of an in-process world of `world` ranks; rethrows the first
// failure; returns each rank's result (nothing when body returns void).
template <class F>
auto on_ranks(int world, F body) {
  using Result = std::invoke_result_t<F&, dist::InProcessComm&>;
  constexpr bool has_result = !std::is_void_v<Result>;
  using Stored = std::conditional_t<has_result, Result, char>;
  dist::InProcessGroup group(world);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<Stored> results(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        dist::InProcessComm comm = group.comm(r);
        if constexpr (has_result) results[static_cast<std::size_t>(r)] = body(comm);
        else body(comm);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if constexpr (has_result) return results;
}

}  // namespace megacpp::testing
