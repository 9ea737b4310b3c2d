// Shared by the in-process communicator tests: on_ranks(world, body) runs body(comm) on every
// rank of an in-process world on its own thread and rethrows the first failure.
#pragma once

#include <exception>
#include <thread>
#include <vector>

#include "megacpp/dist/in_process.hpp"

namespace megacpp::testing {

// Runs body(comm) on every rank of an in-process world of `world` ranks; rethrows the first failure.
template <class F>
void on_ranks(int world, F body) {
  dist::InProcessGroup group(world);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&group, &errors, &body, r] {
      try {
        dist::InProcessComm comm = group.comm(r);
        body(comm);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace megacpp::testing
