// megacpp/nn/moe.hpp: the mixture-of-experts feed-forward (router, routing policies, dispatch,
// the layer). See docs/moe.md.
#pragma once

#include "megacpp/nn/moe/dispatch.hpp"
#include "megacpp/nn/moe/moe.hpp"
#include "megacpp/nn/moe/router.hpp"
#include "megacpp/nn/moe/routing.hpp"
