// Shared test helper: the kernel case registry. One table of cases per kernel contract in
// kernels::AllKernels (megacpp/core/kernels/registry.hpp), each in tests/support/kernel_cases/,
// and the compile-time check that none is missing: ggml's static_assert(GGML_OP_COUNT == ...)
// beside its op tables, so a new contract cannot skip its reference, gradcheck or CPU-vs-CUDA
// case. Run by tests/kernels (fused vs reference and gradcheck on the CPU) and tests/cuda (CUDA
// against the CPU), both through check_kernel_case (kernel_case.hpp).
#pragma once

#include "support/kernel_case.hpp"
#include "support/kernel_cases/causal_conv1d.hpp"
#include "support/kernel_cases/decode_attention.hpp"
#include "support/kernel_cases/expert_routing.hpp"
#include "support/kernel_cases/fused_attention.hpp"
#include "support/kernel_cases/gated_combine.hpp"
#include "support/kernel_cases/grouped_gemm.hpp"
#include "support/kernel_cases/m2rnn_scan.hpp"
#include "support/kernel_cases/m2rnn_step.hpp"
#include "support/kernel_cases/softcap_cross_entropy.hpp"
#include "support/kernel_cases/ssm_rotary.hpp"
#include "support/kernel_cases/ssm_scan.hpp"
#include "support/kernel_cases/ssm_step.hpp"

namespace megacpp::testing {

// True when Kernel has a case table; refuses to compile otherwise, naming the contract in the
// instantiation (kernel_has_cases<megacpp::kernels::Name>).
template <template <class> class Kernel>
constexpr bool kernel_has_cases() {
  static_assert(KernelCases<Kernel>::specialised,
                "megacpp_kernel_without_cases: a kernel contract (Kernel = megacpp::kernels::<Name> in the "
                "instantiation above) has no test cases. Add tests/support/kernel_cases/<name>.hpp with a "
                "specialisation KernelCases<kernels::<Name>> (specialised = true, its reference's name and "
                "cases<T, B>(): the fused op, its naive reference and tolerance, whether gradcheck applies) and "
                "include it from tests/support/kernel_cases.hpp; tests/kernels and tests/cuda then run them");
  return KernelCases<Kernel>::specialised;
}

namespace detail {
template <class List>
struct CaseTablesCover;
template <template <class> class... Ks>
struct CaseTablesCover<kernels::KernelList<Ks...>> {
  static constexpr bool value = (kernel_has_cases<Ks>() && ...);
};
}  // namespace detail

// True when every contract of the list (a kernels::KernelList) has a case table.
template <class List>
constexpr bool kernel_case_tables_cover() {
  return detail::CaseTablesCover<List>::value;
}

static_assert(kernel_case_tables_cover<kernels::AllKernels>(),
              "megacpp_kernel_without_cases: every contract in kernels::AllKernels needs a KernelCases table "
              "(see the error above for which one)");

}  // namespace megacpp::testing
