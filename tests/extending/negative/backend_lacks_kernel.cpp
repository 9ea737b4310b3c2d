// Must not compile: an attention layer on a backend without the FusedAttention kernel.
// FakeBackend has every member function of the Backend concept (inherited from Cpu) but none of
// the CPU backend's kernel specialisations, which are written for Cpu itself. The diagnostic must
// be one static_assert, megacpp_backend_lacks_kernel, with the instantiation naming
// kernels::FusedAttention<FakeBackend>.
#include "megacpp/megacpp.hpp"
#include "megacpp/nn/attention.hpp"

struct FakeBackend : megacpp::Cpu {
  static constexpr std::string_view name = "fake";
};
static_assert(megacpp::Backend<FakeBackend>);

int main() {
  megacpp::Rng rng(0);
  megacpp::AttentionConfig config;
  config.d_model = 16;
  config.n_heads = 2;
  const megacpp::GQA<float, FakeBackend> attention(config, rng);
  const auto docs = megacpp::DocumentLayout<FakeBackend>::single_document(1, 4);
  const megacpp::Var<float, FakeBackend> x(megacpp::Tensor<float, FakeBackend>::zeros({1, 4, 16}));
  return static_cast<int>(attention.forward(x, docs).numel());
}
