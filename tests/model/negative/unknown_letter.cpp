// Must not compile: pattern letter 'E' (MoE) has no block type in RecipeLetters yet.
// Expected diagnostic: megacpp_unknown_pattern_letter.
#include "megacpp/megacpp.hpp"
#include "megacpp/nn/model.hpp"

int main() {
  megacpp::RecipeLM<float, megacpp::Cpu, megacpp::kTinyDims, "AEM"> model(0);
  return static_cast<int>(model.n_layers);
}
