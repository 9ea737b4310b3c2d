// megacpp/autograd.hpp: Var, the backward engine, every differentiable op, gradcheck, and the
// parameters (Param, Role) and module visitor every layer, optimizer and checkpoint shares.
#pragma once

#include "megacpp/autograd/backward.hpp"
#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/gradcheck.hpp"
#include "megacpp/autograd/module.hpp"
#include "megacpp/autograd/ops/cross_entropy.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/embedding.hpp"
#include "megacpp/autograd/ops/gated_combine.hpp"
#include "megacpp/autograd/ops/grouped_matmul.hpp"
#include "megacpp/autograd/ops/matmul.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/autograd/ops/relu2_linear.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/ops/rope.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/autograd/ops/softmax.hpp"
#include "megacpp/autograd/param.hpp"
#include "megacpp/autograd/var.hpp"
#include "megacpp/core.hpp"
