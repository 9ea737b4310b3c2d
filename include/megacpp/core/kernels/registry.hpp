/// \file
/// megacpp/core/kernels/registry.hpp: the list of every kernel contract, for code that must
/// cover them all (the kernel test harness, backend reports).
///
/// Adding a contract means adding it here; tests/support/kernel_cases.hpp then refuses to compile
/// until the new kernel has its cases (reference, gradcheck, backend against backend): the
/// habit of ggml's `static_assert(GGML_OP_COUNT == ...)` beside its op tables.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/kernels/attention_decode.hpp"
#include "megacpp/core/kernels/causal_conv1d.hpp"
#include "megacpp/core/kernels/cross_entropy.hpp"
#include "megacpp/core/kernels/expert_routing.hpp"
#include "megacpp/core/kernels/gated_combine.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"
#include "megacpp/core/kernels/m2rnn_scan.hpp"
#include "megacpp/core/kernels/m2rnn_step.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"
#include "megacpp/core/kernels/ssm_scan.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"

namespace megacpp::kernels {

/// A list of kernel contracts (class templates over the backend).
template <template <class> class... Kernels>
struct KernelList {
  static constexpr std::size_t size = sizeof...(Kernels);  ///< number of contracts
  /// For backend B, which contracts it implements, in list order.
  template <class B>
  static constexpr std::array<bool, size> implemented_by() { return {Kernels<B>::available...}; }
  /// Whether backend B implements every contract of the list.
  template <class B>
  static constexpr bool all_implemented_by() { return (Kernels<B>::available && ...); }
};

/// Every kernel contract, in the order of kKernelNames.
using AllKernels =
    KernelList<FusedAttention, SsmScan, SsmRotary, CausalConv1d, SoftcapCrossEntropy, GroupedGemm, GatedCombine,
               DecodeAttention, SsmStep, M2RNNStep, M2RNNScan, ExpertRouting>;

/// The contracts' names, in the order of AllKernels.
inline constexpr std::array<std::string_view, 12> kKernelNames{
    "FusedAttention", "SsmScan",         "SsmRotary", "CausalConv1d", "SoftcapCrossEntropy", "GroupedGemm",
    "GatedCombine",   "DecodeAttention", "SsmStep",   "M2RNNStep",    "M2RNNScan",           "ExpertRouting"};
static_assert(AllKernels::size == kKernelNames.size(),
              "megacpp_kernel_registry: a contract was added to AllKernels without its name in kKernelNames");

}  // namespace megacpp::kernels
