// Must not compile: 6 query heads cannot share 4 kv heads.
// Expected diagnostic: megacpp_dims_gqa.
#include "megacpp/megacpp.hpp"

inline constexpr megacpp::Dims kBad{.d_model = 48, .n_layers = 1, .vocab = 16};

int main() {
  megacpp::RecipeLM<float, megacpp::Cpu, kBad, "A", megacpp::AttentionSizes{.n_heads = 6, .n_kv_heads = 4}> model(0);
  return static_cast<int>(model.n_layers);
}
