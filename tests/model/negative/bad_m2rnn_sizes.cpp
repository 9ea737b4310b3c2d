// Must not compile: an 'R' letter whose causal conv is wider than the conv1d kernels allow.
// Expected diagnostic: megacpp_dims_m2rnn.
#include "megacpp/megacpp.hpp"

int main() {
  constexpr megacpp::M2RNNSizes wide{.heads = 2, .k_head_dim = 16, .v_head_dim = 16, .conv_kernel = 17};
  megacpp::RecipeLM<float, megacpp::Cpu, megacpp::kTinyDims, "AMR", megacpp::kTinyAttention, megacpp::kTinyMamba, wide> model(0);
  return static_cast<int>(model.n_layers);
}
