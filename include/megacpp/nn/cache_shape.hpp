// megacpp/nn/cache_shape.hpp: what every decode step (attention KV cache, Mamba and M2RNN states)
// checks first: that a cache was made for this layer and batch.
//
// The steps update their caches in place, in backend memory, through the decode kernel contracts
// (DecodeAttention, SsmStep, M2RNNStep, CausalConv1d on the conv window); check_cache_shape names a
// cache made for another layer or batch before any kernel touches it.
#pragma once

#include "megacpp/core/error.hpp"
#include "megacpp/core/shape.hpp"

namespace megacpp::detail {

// Checks that a cache tensor has the shape this layer and batch need.
inline void check_cache_shape(const char* who, const char* field, const Shape& got, const Shape& want) {
  check(got == want, who, "cache.", field, " is ", got, " but this layer and batch need ", want,
        " (make the cache with the layer's make_cache)");
}

}  // namespace megacpp::detail
