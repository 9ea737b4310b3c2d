// tests/cuda_emulation/routing_emulated.hpp: the CUDA MoE expert routing (ExpertRouting<Cuda>:
// detail/expert_routing.cuh) with its own kernels run on the emulator and host memory as device
// memory.
#pragma once

#include "megacpp/core/kernels/expert_routing.hpp"

namespace megacpp::cuda_emulation {

/// ExpertRouting<Cuda>::route on host memory, as detail/expert_routing.cuh runs it: its two
/// kernels (detail/expert_routing_kernels.cuh) unmodified on the emulator, and in place of CUB's
/// stable radix sort by expert and Thrust's lower_bound, std::stable_sort and std::lower_bound on
/// the same keys and bits (those two library calls run on a GPU in tests/cuda only).
kernels::RoutingFault emulated_route_experts(const kernels::ExpertRoutingParams& p,
                                             const kernels::ExpertRoutingArgs<float>& a);
/// Same, for double scores.
kernels::RoutingFault emulated_route_experts(const kernels::ExpertRoutingParams& p,
                                             const kernels::ExpertRoutingArgs<double>& a);

}  // namespace megacpp::cuda_emulation
