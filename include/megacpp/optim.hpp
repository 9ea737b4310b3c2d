// megacpp/optim.hpp: optimisers (Muon, AdamW, the Role-routed Hybrid), parameter groups,
// gradient clipping, LR schedules, optimiser state and distributed Muon's shard plan.
#pragma once

/// \namespace megacpp::optim
/// Optimisers: Muon (Newton-Schulz orthogonalised momentum) for 2-D hidden matrices, AdamW for
/// everything else, the Role-routed Hybrid of the two, parameter groups, gradient clipping, LR
/// schedules with absolute warmup, checkpointable state and the distributed-Muon hook.

#include "megacpp/optim/adamw.hpp"
#include "megacpp/optim/clip.hpp"
#include "megacpp/optim/functors.hpp"
#include "megacpp/optim/hybrid.hpp"
#include "megacpp/optim/muon.hpp"
#include "megacpp/optim/muon_scale.hpp"
#include "megacpp/optim/newton_schulz.hpp"
#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/schedule.hpp"
#include "megacpp/optim/shard_plan.hpp"
#include "megacpp/optim/state.hpp"
#include "megacpp/optim/sum_of_squares.hpp"
