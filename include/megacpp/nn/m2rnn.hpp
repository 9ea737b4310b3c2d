// megacpp/nn/m2rnn.hpp: the M2RNN mixer (the recipe's 'R' letter), its recurrence op and config.
//
//   Block<M2RNN<T, B>>
//
// Headers, bottom to top: config (dimensions, the reference's defaults), recurrence (the
// non-linear matrix-state recurrence, its exact backward, one graph node), m2rnn (the layer and
// its decode cache). docs/m2rnn.md has the formulas and their sources.
#pragma once

#include "megacpp/nn/block.hpp"
#include "megacpp/nn/m2rnn/config.hpp"
#include "megacpp/nn/m2rnn/m2rnn.hpp"
#include "megacpp/nn/m2rnn/recurrence.hpp"
