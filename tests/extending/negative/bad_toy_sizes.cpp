// Must not compile: the toy letter's EMA width is negative.
// Expected diagnostic: megacpp_toy_negative_size (tests/extending/toy_blocks.hpp, ToyLetter).
#include "extending/toy_blocks.hpp"
#include "megacpp/megacpp.hpp"
#include "megacpp/nn/model.hpp"

inline constexpr megacpp::Dims kDims{.d_model = 32, .n_layers = 1, .vocab = 64};
inline constexpr megacpp::toy::ToySizes kBad{.ema_width = -4};

int main() {
  using Toy = megacpp::Letters<megacpp::Letter<'T', megacpp::toy::ToyLetter<kBad>>>;
  megacpp::LM<float, megacpp::Cpu, kDims, megacpp::Pattern<"T">, Toy> model(0);
  return static_cast<int>(model.n_layers);
}
