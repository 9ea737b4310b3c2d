// tests/cuda_emulation/test_expert_routing.cpp: the CUDA MoE expert routing's kernels
// (detail/expert_routing_kernels.cuh: the gate choice, a thread per token, and the rows of the
// sorted pairs) on the emulator against ExpertRouting<Cpu>: the same gate indices, sorted rows,
// slot rows and group offsets, integer for integer, in float and double, with and without a
// choice bias, on scores in quarters so that ties are common; and the first non-finite score
// reported in (token, expert) order under the forward and the reversed schedule.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "emulator/options.hpp"
#include "host_arrays.hpp"
#include "routing_emulated.hpp"

#include "megacpp/backends/cpu/kernels.hpp"

namespace megacpp::cuda_emulation {
namespace {

// Every output of one routing call, the fault's position beside them.
struct Routed {
  std::vector<std::int32_t> score_index, token_of_row, row_of_slot;
  std::vector<index_t> offsets;
  index_t fault_token = -1, fault_expert = -1;
  bool operator==(const Routed&) const = default;
};

template <class T, class Route>
Routed run(Route route, const kernels::ExpertRoutingParams& p, const std::vector<T>& scores,
           const std::vector<double>* bias) {
  const auto rows = static_cast<std::size_t>(p.rows());
  Routed out{std::vector<std::int32_t>(rows, -5), std::vector<std::int32_t>(rows, -5), std::vector<std::int32_t>(rows, -5),
             std::vector<index_t>(static_cast<std::size_t>(p.experts + 1), -5)};
  const kernels::RoutingFault fault =
      route(p, kernels::ExpertRoutingArgs<T>{scores.data(), bias ? bias->data() : nullptr, out.score_index.data(),
                                             out.token_of_row.data(), out.row_of_slot.data(), out.offsets.data()});
  out.fault_token = fault.token;
  out.fault_expert = fault.expert;
  if (fault) {  // the indices are unspecified after a fault: compare the fault alone
    out.score_index.clear();
    out.token_of_row.clear();
    out.row_of_slot.clear();
    out.offsets.clear();
  }
  return out;
}

template <class T>
Routed on_cpu(const kernels::ExpertRoutingParams& p, const std::vector<T>& scores, const std::vector<double>* bias) {
  return run<T>([](const auto& params, const auto& args) { return kernels::ExpertRouting<Cpu>::route<T>(params, args); },
                p, scores, bias);
}

template <class T>
Routed emulated(const kernels::ExpertRoutingParams& p, const std::vector<T>& scores, const std::vector<double>* bias) {
  return run<T>([](const auto& params, const auto& args) { return emulated_route_experts(params, args); }, p, scores,
                bias);
}

// Scores in quarters of [-2, 2): few distinct values, so many ties between experts.
template <class T>
std::vector<T> quarter_scores(index_t tokens, index_t experts, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<T> s = uniform<T>(static_cast<std::size_t>(tokens * experts), rng, -2.0, 2.0);
  for (T& x : s) x = static_cast<T>(std::floor(static_cast<double>(x) * 4.0) / 4.0);
  return s;
}

struct RoutingCase {
  index_t tokens, experts, k;
  bool with_bias;
};

template <class T>
void check_against_cpu() {
  const std::vector<RoutingCase> cases{{1, 1, 1, false},   {37, 8, 2, true},   {300, 5, 5, false},
                                       {700, 64, 8, true}, {513, 3, 1, false}, {0, 4, 2, true}};
  std::uint64_t seed = 11;
  for (const RoutingCase& c : cases) {
    const kernels::ExpertRoutingParams p{c.tokens, c.experts, c.k};
    const std::vector<T> scores = quarter_scores<T>(c.tokens, c.experts, ++seed);
    std::vector<double> bias(static_cast<std::size_t>(c.experts));
    for (index_t e = 0; e < c.experts; ++e) bias[static_cast<std::size_t>(e)] = 0.25 * static_cast<double>(e % 3);
    const std::vector<double>* b = c.with_bias ? &bias : nullptr;
    INFO("tokens " << c.tokens << ", experts " << c.experts << ", k " << c.k << (c.with_bias ? ", with bias" : ""));
    const Routed expected = on_cpu<T>(p, scores, b);
    CHECK(expected.fault_token == -1);
    CHECK(emulated<T>(p, scores, b) == expected);
    Options reversed;
    reversed.reverse_schedule = true;
    const OptionsScope scope(reversed);
    CHECK(emulated<T>(p, scores, b) == expected);
  }
}

TEST_CASE("ExpertRouting<Cuda>'s kernels on the emulator: the CPU's indices and offsets, exactly", "[routing]") {
  check_against_cpu<float>();
  check_against_cpu<double>();
}

TEST_CASE("ExpertRouting<Cuda>'s kernels on the emulator: the first non-finite score in (token, expert) order",
          "[routing]") {
  const index_t tokens = 600, E = 8;  // three blocks of 256 threads: faults in the second and third
  const kernels::ExpertRoutingParams p{tokens, E, 2};
  std::vector<float> scores = quarter_scores<float>(tokens, E, 5);
  scores[static_cast<std::size_t>(520 * E + 1)] = std::numeric_limits<float>::quiet_NaN();
  scores[static_cast<std::size_t>(300 * E + 7)] = std::numeric_limits<float>::infinity();
  scores[static_cast<std::size_t>(300 * E + 6)] = -std::numeric_limits<float>::infinity();  // first of token 300
  for (const bool reverse : {false, true}) {
    Options o;
    o.reverse_schedule = reverse;
    const OptionsScope scope(o);
    INFO((reverse ? "reversed schedule" : "forward schedule"));
    const Routed cpu = on_cpu<float>(p, scores, nullptr), emu = emulated<float>(p, scores, nullptr);
    CHECK(cpu.fault_token == 300);
    CHECK(cpu.fault_expert == 6);
    CHECK(emu == cpu);
  }
}

}  // namespace
}  // namespace megacpp::cuda_emulation
