// megacpp/nn/attention.hpp: the attention layer, its fused op, the dense reference, and the CPU
// backend's fused kernel (the CPU backend is always part of megacpp::megacpp; a CUDA build adds
// its own FusedAttention<Cuda> specialisation).
#pragma once

#include "megacpp/backends/cpu/attention.hpp"  // first: includes the CPU backend (Eigen behind its guard)
#include "megacpp/nn/attention/attention.hpp"
#include "megacpp/nn/attention/dense_reference.hpp"
#include "megacpp/nn/attention/flash_attention.hpp"
#include "megacpp/nn/attention/kernel.hpp"
#include "megacpp/nn/attention/policies.hpp"
#include "megacpp/nn/attention/tiling.hpp"
#include "megacpp/nn/attention/yarn.hpp"
