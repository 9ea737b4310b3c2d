// tests/cuda/cpu_reference.cpp: runs the shared backend cases and the kernel cases on the CPU
// backend (host compiler; see cpu_reference.hpp for why this is a separate translation unit).
#include "cpu_reference.hpp"

#include "backend_cases.hpp"
#include "model_step.hpp"
#include "support/kernel_cases.hpp"

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

// Calls visit.template operator()<Kernel>() for the contract at index `contract` of AllKernels.
template <class Visit>
void visit_contract(std::size_t contract, Visit&& visit) {
  check(contract < kernels::AllKernels::size, "cpu_reference", "kernel contract ", contract, " out of range (",
        kernels::AllKernels::size, " contracts)");
  testing::for_each_kernel(kernels::AllKernels{}, [&]<template <class> class Kernel>(std::size_t index) {
    if (index == contract) visit.template operator()<Kernel>();
  });
}

template <class T>
std::vector<std::vector<double>> kernel_outputs_on_cpu(std::size_t contract, std::size_t index) {
  std::vector<std::vector<double>> out;
  visit_contract(contract, [&]<template <class> class Kernel>() {
    out = testing::run_fused(testing::KernelCases<Kernel>::template cases<T, Cpu>().at(index),
                             testing::kernel_case_seed<Kernel>(index));
  });
  return out;
}
}  // namespace

std::size_t cpu_case_count() { return all_cases<float, Cpu>().size(); }
std::string cpu_case_name(std::size_t index) { return all_cases<float, Cpu>().at(index).name; }

std::vector<std::vector<double>> cpu_reference(std::size_t index, bool use_double) {
  return use_double ? run_on_cpu<double>(index) : run_on_cpu<float>(index);
}

std::size_t cpu_kernel_case_count(std::size_t contract) {
  std::size_t count = 0;
  visit_contract(contract, [&]<template <class> class Kernel>() {
    count = testing::KernelCases<Kernel>::template cases<float, Cpu>().size();
  });
  return count;
}

std::string cpu_kernel_case_name(std::size_t contract, std::size_t index) {
  std::string name;
  visit_contract(contract, [&]<template <class> class Kernel>() {
    name = testing::KernelCases<Kernel>::template cases<float, Cpu>().at(index).name;
  });
  return name;
}

std::vector<std::vector<double>> cpu_kernel_outputs(std::size_t contract, std::size_t index, bool use_double) {
  return use_double ? kernel_outputs_on_cpu<double>(contract, index) : kernel_outputs_on_cpu<float>(contract, index);
}

std::vector<std::vector<double>> cpu_model_step(std::size_t pattern, bool use_double) {
  return use_double ? model_step_outputs<double, Cpu>(pattern) : model_step_outputs<float, Cpu>(pattern);
}

std::vector<std::vector<double>> cpu_model_step_bf16(std::size_t pattern) {
  return model_step_outputs<float, Cpu>(pattern, true);
}

std::vector<std::int32_t> cpu_generate_from_checkpoint(const std::string& path, const std::vector<std::int32_t>& prompt,
                                                       long long n_new) {
  return generate_from_checkpoint<Cpu>(path, prompt, static_cast<index_t>(n_new));
}

}  // namespace megacpp::backend_test
