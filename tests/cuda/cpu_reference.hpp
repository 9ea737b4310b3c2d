// tests/cuda/cpu_reference.hpp: the CPU backend's results for the shared backend cases, behind
// an interface of plain C++ types.
//
// The CPU backend is built on Eigen, which does not compile cleanly under nvcc; so it lives in
// its own translation unit (cpu_reference.cpp, host compiler) and the CUDA test reaches it only
// through these declarations. Op cases are addressed by their index in all_cases<T, B>(); kernel
// cases (tests/support/kernel_cases.hpp) by their contract's index in kernels::AllKernels and
// their index in that contract's table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace megacpp::backend_test {

// Number of cases and the name of one, as the CPU translation unit sees the case list (the
// CUDA side checks that it sees the same list).
std::size_t cpu_case_count();
std::string cpu_case_name(std::size_t index);

// Outputs of case `index` run on the CPU backend in float (use_double = false) or double.
std::vector<std::vector<double>> cpu_reference(std::size_t index, bool use_double);

// Number of cases of kernel contract `contract` and the name of one, as the CPU translation unit
// sees the tables.
std::size_t cpu_kernel_case_count(std::size_t contract);
std::string cpu_kernel_case_name(std::size_t contract, std::size_t index);

// The fused op's outputs (value, then input gradients) of kernel case `index` of contract
// `contract` on the CPU backend, in float (use_double = false) or double.
std::vector<std::vector<double>> cpu_kernel_outputs(std::size_t contract, std::size_t index, bool use_double);

// Loss and parameter gradients of the whole-model step model_step_patterns()[pattern]
// (model_step.hpp) on the CPU backend, in float or double.
std::vector<std::vector<double>> cpu_model_step(std::size_t pattern, bool use_double);
// The same in float under bf16 products (MatmulPrecision::bf16).
std::vector<std::vector<double>> cpu_model_step_bf16(std::size_t pattern);

// The tiny "AAM" model loaded on the CPU from `path` (written by the CUDA test): its greedy
// continuation of `prompt` by n_new tokens (model_step.hpp, generate_from_checkpoint).
std::vector<std::int32_t> cpu_generate_from_checkpoint(const std::string& path, const std::vector<std::int32_t>& prompt,
                                                       long long n_new);

}  // namespace megacpp::backend_test
