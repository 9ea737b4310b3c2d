// megacpp/nn.hpp: layers (parameters with roles, Linear, MLP, documents, blocks).
#pragma once

#include "megacpp/nn/block.hpp"
#include "megacpp/nn/documents.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/mlp.hpp"
#include "megacpp/nn/param.hpp"
