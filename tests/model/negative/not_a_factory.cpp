// Must not compile: letter 'X' maps to a recipe whose factory has no describe(), so it is not a
// BlockFactory. Expected diagnostic: megacpp_letter_not_a_block_factory, and nothing else.
#include "megacpp/megacpp.hpp"

struct NoDescribe {
  template <class T, class B, megacpp::Dims D>
  struct factory {
    using type = megacpp::Block<megacpp::GQA<T, B>>;
    static type make(megacpp::Rng& rng) {
      return type(megacpp::GQA<T, B>({.d_model = D.d_model, .n_heads = 2}, rng), megacpp::MLP<T, B>(D.d_model, rng));
    }
  };
};

inline constexpr megacpp::Dims kDims{.d_model = 16, .n_layers = 1, .vocab = 16};

int main() {
  megacpp::LM<float, megacpp::Cpu, kDims, megacpp::Pattern<"X">, megacpp::Letters<megacpp::Letter<'X', NoDescribe>>> model(0);
  return static_cast<int>(model.n_layers);
}
