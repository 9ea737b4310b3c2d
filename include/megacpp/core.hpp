// megacpp/core.hpp: tensors, shapes, element types, errors, the backend contract and the fused
// kernels' contracts (megacpp/core/kernels/).
#pragma once

#include "megacpp/core/backend.hpp"
#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/config.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/kernels.hpp"
#include "megacpp/core/loss_mask.hpp"
#include "megacpp/core/memory_counter.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/core/shape.hpp"
#include "megacpp/core/tensor.hpp"
#include "megacpp/core/version.hpp"
