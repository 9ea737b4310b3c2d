/// \file
/// megacpp/core/kernels/kernel.hpp: how a layer reaches a fused kernel, the one mechanism.
///
/// The `Backend` concept (megacpp/core/backend.hpp) is what every backend must provide: memory,
/// GEMM, elementwise maps and reductions, the row kernels autograd's generic ops are written on.
/// A *fused kernel* is one forward/backward pair for one layer's hot path (attention, the SSM
/// scan, Mamba-3's rotary angles, the document-aware conv1d, the LM head's fused cross-entropy;
/// the MoE experts' grouped GEMM). Each has a *kernel contract* in this folder (MLX's
/// `fast::ScaledDotProductAttention` shape: a primitive declared below the layers, implemented per
/// backend):
///
///   - a parameter struct (sizes, resolved options, tuning hints) and argument structs (the data
///     pointers), never a positional argument list;
///   - a primary class template `Kernel<B>` whose members spell the contract's signatures. It
///     sets `available = false`, and each of its members refuses to compile through
///     `require<Kernel<B>>()`: one static_assert, naming the kernel and the backend in its
///     instantiation, however many call sites reach it;
///   - a backend implements the kernel by specialising `Kernel<TheBackend>` with
///     `available = true` and the same members (the CPU backend's are in
///     megacpp/backends/cpu/kernels.hpp). Statistics come back as return values; no kernel keeps
///     process-wide mutable state.
///
/// A layer calls `kernels::FusedAttention<B>::forward(params, docs, args)`; whether B implements
/// it is decided at compile time. A formula both a kernel and a layer need (document starts,
/// angle advance, chunk plans, tiling) lives once in the contract's header, MEGACPP_HD where
/// device code needs it too.
#pragma once

#include <concepts>

namespace megacpp::kernels {

/// True for a kernel contract's specialisation that a backend implements (`available = true`);
/// false for the primary template (no implementation for that backend).
template <class Kernel>
concept Implemented = Kernel::available;

/// Refuses to compile unless `Kernel` (a contract's specialisation for one backend) is
/// implemented. Called from every member of every primary template, so an unimplemented kernel
/// fails with this one message, and the instantiation above it names kernel and backend.
template <class Kernel>
constexpr void require() {
  static_assert(Implemented<Kernel>,
                "megacpp_backend_lacks_kernel: the backend has no implementation of the kernel contract named in the "
                "instantiation above (Kernel = megacpp::kernels::<Name><Backend>). Include the backend's header "
                "(<megacpp/backends/cpu.hpp> for Cpu) or specialise the contract for your backend: see "
                "megacpp/core/kernels/ and docs/extending.md");
}

}  // namespace megacpp::kernels
