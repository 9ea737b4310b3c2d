// megacpp/nn/attention.hpp: the attention layer (GQA with policies, decode cache, YaRN), its fused
// op and the dense reference. The kernel is reached through its contract
// (megacpp/core/kernels/attention.hpp); include a backend (<megacpp/backends/cpu.hpp>) to run it.
#pragma once

#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/kernels/attention_tiling.hpp"
#include "megacpp/nn/attention/attention.hpp"
#include "megacpp/nn/attention/decode.hpp"
#include "megacpp/nn/attention/dense_reference.hpp"
#include "megacpp/nn/attention/flash_attention.hpp"
#include "megacpp/nn/attention/policies.hpp"
#include "megacpp/nn/attention/yarn.hpp"
