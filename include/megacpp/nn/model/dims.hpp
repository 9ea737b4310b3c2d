// megacpp/nn/model/dims.hpp: the sizes every block of a model shares, as a compile-time value.
//
// Dims is a structural type, so it is a template argument: LM<float, Cpu, Dims{...}, ...> with
// other sizes is another type (each specialist size is its own type), and an inconsistent size
// is a compile error rather than a run-time surprise. Only what all blocks share lives here:
// the width of the residual stream, the depth, the vocabulary and the longest sequence. Each
// letter of a pattern carries its own sizes (heads, state size, MLP width: AttentionSizes,
// MambaSizes in megacpp/nn/model/letters.hpp), so a new block type adds its own sizes struct
// instead of growing this one.
#pragma once

#include "megacpp/core/config.hpp"

namespace megacpp {

/// Sizes of a language model shared by all its blocks.
struct Dims {
  index_t d_model = 0;      ///< width of the residual stream
  index_t n_layers = 0;     ///< blocks; the pattern repeats to fill them
  index_t vocab = 0;        ///< vocabulary (tied embedding and head)
  index_t max_seq = 65536;  ///< longest sequence the model accepts
};

/// Compile-time checks of a Dims value; each message says what to change.
template <Dims D>
constexpr bool validate_dims() {
  static_assert(D.d_model > 0 && D.n_layers > 0 && D.vocab > 0,
                "megacpp_dims_incomplete: set d_model, n_layers and vocab (all > 0)");
  static_assert(D.max_seq > 0, "megacpp_dims_max_seq: max_seq must be positive");
  return true;
}

}  // namespace megacpp
