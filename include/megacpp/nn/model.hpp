// megacpp/nn/model.hpp: compile-time model composition (Dims, Pattern, Letters, LM, specialists),
// curriculum phases and generation.
#pragma once

#include "megacpp/nn/model/dims.hpp"
#include "megacpp/nn/model/lm.hpp"
#include "megacpp/nn/model/pattern.hpp"
#include "megacpp/nn/model/specialists.hpp"
#include "megacpp/nn/model/masking_check.hpp"
#include "megacpp/nn/model/curriculum.hpp"
#include "megacpp/nn/model/sampling.hpp"
