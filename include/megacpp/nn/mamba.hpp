// megacpp/nn/mamba.hpp: the Mamba-3 and Mamba-2 mixers, their ops and the CPU kernels they run on.
//
//   Block<Mamba3<T, B, SISO>>, Block<Mamba3<T, B, MIMO<4>>>, Block<Mamba2<T, B>>
//
// Headers, bottom to top: functors/elementwise (softplus, clamp_max), scan_inputs (the scan's
// operands), chunked_scan (training, fused op with hand-written backward) and sequential_scan
// (the literal recurrence: reference and decoding), rotary (Mamba-3 angles), conv1d (Mamba-2's
// doc-aware short conv), config (dimensions and policies), mamba3, mamba2, decode (caches).
// The CPU kernels (megacpp/backends/cpu/ssm_scan.hpp, ssm_rotary.hpp, conv1d.hpp) are included
// first so the layers find them for megacpp::Cpu.
#pragma once

#include "megacpp/backends/cpu/ssm_scan.hpp"

#include "megacpp/nn/mamba/chunked_scan.hpp"
#include "megacpp/nn/mamba/config.hpp"
#include "megacpp/nn/mamba/conv1d.hpp"
#include "megacpp/nn/mamba/decode.hpp"
#include "megacpp/nn/mamba/elementwise.hpp"
#include "megacpp/nn/mamba/kernels.hpp"
#include "megacpp/nn/mamba/mamba2.hpp"
#include "megacpp/nn/mamba/mamba3.hpp"
#include "megacpp/nn/mamba/rotary.hpp"
#include "megacpp/nn/mamba/scan_inputs.hpp"
#include "megacpp/nn/mamba/sequential_scan.hpp"
#include "megacpp/nn/block.hpp"
