// Layers shared by every block type: documents from BOS positions, Linear, MLP, Block.
#include "support/op_testing.hpp"

#include "megacpp/nn.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

TEST_CASE("DocumentLayout: doc_ids = cumsum(input_ids == BOS), positions restart per document", "[nn][documents]") {
  // Row 0 starts with BOS; row 1 starts mid-document (token 7) and holds two more documents.
  const std::vector<std::int32_t> ids{0, 5, 6, 0, 7, 0, 0, 1};
  const auto docs = DocumentLayout<Cpu>::from_tokens(ids, 2, 4, /*bos_id=*/0);
  CHECK(docs.doc_ids.to_host() == std::vector<std::int32_t>{1, 1, 1, 2, 0, 1, 2, 2});
  CHECK(docs.positions.to_host() == std::vector<std::int32_t>{0, 1, 2, 0, 0, 0, 0, 1});
  REQUIRE(docs.spans[0].size() == 2);
  CHECK((docs.spans[0][0].start == 0 && docs.spans[0][0].length == 3));
  CHECK((docs.spans[0][1].start == 3 && docs.spans[0][1].length == 1));
  REQUIRE(docs.spans[1].size() == 3);
  CHECK((docs.spans[1][2].start == 2 && docs.spans[1][2].length == 2));
  CHECK(docs.same_document(0, 0, 2));
  CHECK_FALSE(docs.same_document(0, 2, 3));
  const auto absolute = DocumentLayout<Cpu>::from_tokens(ids, 2, 4, 0, Positions::absolute);
  CHECK(absolute.positions.to_host() == std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3});
  CHECK(absolute.doc_ids.to_host() == docs.doc_ids.to_host());
  CHECK_THROWS_WITH(DocumentLayout<Cpu>::from_tokens(ids, 3, 4, 0), Contains("input_ids holds 8 tokens, layout (3, 4) needs 12"));
}

TEST_CASE("Linear and MLP: shapes, roles, zero-initialised output projection, gradients", "[nn]") {
  Rng rng(1);
  Linear<double, Cpu> lin(4, 3, rng, LinearInit::normal, /*with_bias=*/true);
  std::vector<std::string> names;
  lin.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    names.push_back(n + ":" + std::string(role_name(p.role)));
  }, "head");
  CHECK(names == std::vector<std::string>{"head.weight:matrix", "head.bias:bias"});
  auto x = random_param({2, 5, 4}, 2);
  require_gradcheck("linear", [&](auto& in) { return lin.forward(in[0]); }, {x, lin.weight.var, lin.bias.var});

  MLP<double, Cpu> mlp(4, rng);
  CHECK(mlp.fc.weight.shape() == Shape{16, 4});
  CHECK(mlp.proj.weight.shape() == Shape{4, 16});
  for (double w : mlp.proj.weight.value().to_host()) REQUIRE(w == 0.0);  // zero-init output projection
  mlp.proj.weight.var.mutable_value().assign(randn<double, Cpu>({4, 16}, rng, 0.3));
  require_gradcheck("mlp", [&](auto& in) { return mlp.forward(in[0]); }, {x, mlp.fc.weight.var, mlp.proj.weight.var});
  CHECK_THROWS_WITH(lin.forward(random_param({2, 3}, 3)), Contains("does not match in_features 4"));
}

namespace {
// The simplest Mixer for composition tests: a per-position projection (mixes no positions).
struct ProjectionMixer {
  using value_type = double;
  using backend_type = Cpu;
  Linear<double, Cpu> w;
  Var<double, Cpu> forward(const Var<double, Cpu>& x, const DocumentLayout<Cpu>&) const { return w.forward(x); }
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") { w.for_each_param(visit, child_name(prefix, "w")); }
};
}  // namespace

TEST_CASE("Block: pre-norm residual composition, names and gradients", "[nn][block]") {
  Rng rng(4);
  Block<ProjectionMixer> block{ProjectionMixer{Linear<double, Cpu>(6, 6, rng)}, MLP<double, Cpu>(6, rng)};
  block.ffn.proj.weight.var.mutable_value().assign(randn<double, Cpu>({6, 24}, rng, 0.2));
  std::vector<std::string> names;
  block.for_each_param([&](const std::string& n, Param<double, Cpu>&) { names.push_back(n); }, "blocks.0");
  CHECK(names == std::vector<std::string>{"blocks.0.mixer.w.weight", "blocks.0.ffn.fc.weight", "blocks.0.ffn.proj.weight"});
  const auto docs = DocumentLayout<Cpu>::single_document(2, 3);
  auto x = random_param({2, 3, 6}, 5);
  require_gradcheck("block", [&](auto& in) { return block.forward(in[0], docs); },
                    {x, block.mixer.w.weight.var, block.ffn.fc.weight.var});
}
