// megacpp/nn/mamba.hpp: the Mamba-3 and Mamba-2 mixers, their ops and the CPU kernels they run on.
//
//   Block<Mamba3<T, B, SISO>>, Block<Mamba3<T, B, MIMO<4>>>, Block<Mamba2<T, B>>
//
// Headers, bottom to top: functors/elementwise (softplus, clamp_max), scan_inputs (the scan's
// operands), chunked_scan (training, fused op with hand-written backward) and sequential_scan
// (the literal recurrence: reference and decoding), rotary (Mamba-3 angles), conv1d (Mamba-2's
// doc-aware short conv), config (dimensions and policies), mamba3, mamba2, decode (caches).
// The kernels are reached through their contracts (megacpp/core/kernels/ssm_scan.hpp,
// ssm_rotary.hpp, causal_conv1d.hpp); include a backend (<megacpp/backends/cpu.hpp>) to run them.
#pragma once

#include "megacpp/nn/mamba/a_activation.hpp"
#include "megacpp/nn/mamba/chunked_scan.hpp"
#include "megacpp/nn/mamba/config.hpp"
#include "megacpp/nn/mamba/conv1d.hpp"
#include "megacpp/nn/mamba/decode.hpp"
#include "megacpp/nn/mamba/elementwise.hpp"
#include "megacpp/nn/mamba/mamba2.hpp"
#include "megacpp/nn/mamba/mamba3.hpp"
#include "megacpp/nn/mamba/rotary.hpp"
#include "megacpp/nn/mamba/scan_inputs.hpp"
#include "megacpp/nn/mamba/sequential_scan.hpp"
#include "megacpp/nn/mamba/upstream_layout.hpp"
#include "megacpp/nn/block.hpp"
