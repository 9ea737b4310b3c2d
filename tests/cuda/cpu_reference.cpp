// tests/cuda/cpu_reference.cpp: runs the shared backend cases on the CPU backend (host
// compiler; see cpu_reference.hpp for why this is a separate translation unit).
#include "cpu_reference.hpp"

#include "backend_cases.hpp"
#include "megacpp/backends/cpu.hpp"

namespace megacpp::backend_test {

namespace {
template <class T>
std::vector<std::vector<double>> run_on_cpu(std::size_t index) {
  const auto cases = all_cases<T, Cpu>();
  check(index < cases.size(), "cpu_reference", "case ", index, " out of range (", cases.size(), " cases)");
  Harness<T, Cpu> harness(case_seed(index));
  return cases[index].run(harness);
}
}  // namespace

std::size_t cpu_case_count() { return all_cases<float, Cpu>().size(); }
std::string cpu_case_name(std::size_t index) { return all_cases<float, Cpu>().at(index).name; }

std::vector<std::vector<double>> cpu_reference(std::size_t index, bool use_double) {
  return use_double ? run_on_cpu<double>(index) : run_on_cpu<float>(index);
}

}  // namespace megacpp::backend_test
