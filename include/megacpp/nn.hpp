// megacpp/nn.hpp: every layer: Linear, MLP, the block and its concepts, auxiliary losses, attention,
// Mamba-3 / Mamba-2, mixture-of-experts, the fused linear + cross-entropy head, and whole-model composition.
#pragma once

#include "megacpp/nn/attention.hpp"
#include "megacpp/nn/aux_loss.hpp"
#include "megacpp/nn/block.hpp"
#include "megacpp/nn/cache_shape.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/linear_cross_entropy.hpp"
#include "megacpp/nn/m2rnn.hpp"
#include "megacpp/nn/mamba.hpp"
#include "megacpp/nn/mlp.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/nn/moe.hpp"
