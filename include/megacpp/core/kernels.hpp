/// \file
/// megacpp/core/kernels.hpp: every kernel contract (megacpp/core/kernels/), the document layout
/// they read, and the mechanism a layer reaches them by (kernels/kernel.hpp).
#pragma once

#include "megacpp/core/kernels/attention.hpp"
#include "megacpp/core/kernels/attention_decode.hpp"
#include "megacpp/core/kernels/attention_tiling.hpp"
#include "megacpp/core/kernels/causal_conv1d.hpp"
#include "megacpp/core/kernels/cross_entropy.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/gated_combine.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"
#include "megacpp/core/kernels/kernel.hpp"
#include "megacpp/core/kernels/registry.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"
#include "megacpp/core/kernels/ssm_scan.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"
