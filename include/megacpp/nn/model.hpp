// megacpp/nn/model.hpp: compile-time model composition (Dims, Pattern, Letters, the library's
// letters, LM, the recipe's specialists), the document-masking checker and generation.
#pragma once

#include "megacpp/nn/model/dims.hpp"
#include "megacpp/nn/model/letters.hpp"
#include "megacpp/nn/model/lm.hpp"
#include "megacpp/nn/model/masking_check.hpp"
#include "megacpp/nn/model/mtp.hpp"
#include "megacpp/nn/model/moe_letter.hpp"
#include "megacpp/nn/model/pattern.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "megacpp/nn/model/specialists.hpp"
