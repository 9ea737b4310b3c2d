// megacpp/plasticity.hpp: the plasticity interventions (umbrella header).
#pragma once

/// \file
/// megacpp/plasticity.hpp: FIRE, DASH and ReDo (docs/systems/plasticity.md): one-shot
/// orthogonalisation at phase boundaries, periodic row shrinking, recycling of dormant units,
/// each with its optimiser-state repair and each shard-aware. Below the layers: it works on
/// parameters (optim::ParamRef, Role) and optimiser state, never on nn types.

#include "megacpp/plasticity/dash.hpp"
#include "megacpp/plasticity/fire.hpp"
#include "megacpp/plasticity/redo.hpp"
#include "megacpp/plasticity/shard.hpp"
#include "megacpp/plasticity/state_repair.hpp"
#include "megacpp/plasticity/targets.hpp"
