// Must not compile: a kernel contract listed beside the registered ones without a case table in
// tests/support/kernel_cases/ (as when a contract is added to kernels::AllKernels and its cases
// are forgotten). Expected diagnostic: megacpp_kernel_without_cases.
#include "support/kernel_cases.hpp"

namespace megacpp::kernels {
// A contract like any other (primary template: not implemented), but with no KernelCases table.
template <class B>
struct UntestedKernel {
  static constexpr bool available = false;
};
}  // namespace megacpp::kernels

using ListWithUntestedKernel =
    megacpp::kernels::KernelList<megacpp::kernels::FusedAttention, megacpp::kernels::UntestedKernel>;
static_assert(megacpp::testing::kernel_case_tables_cover<ListWithUntestedKernel>());

int main() { return 0; }
