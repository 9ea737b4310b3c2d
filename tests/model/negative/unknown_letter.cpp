// Must not compile: pattern letter 'E' (MoE) has no block type in the A/M table RecipeLetters (it
// is in RecipeMoELetters).
// Expected diagnostic: megacpp_unknown_pattern_letter.
#include "megacpp/megacpp.hpp"

int main() {
  megacpp::RecipeLM<float, megacpp::Cpu, megacpp::kTinyDims, "AEM", megacpp::kTinyAttention, megacpp::kTinyMamba> model(0);
  return static_cast<int>(model.n_layers);
}
