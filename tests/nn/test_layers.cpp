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

TEST_CASE("DocumentLayout: from_lengths, from_spans (padding), the span table and edited spans", "[nn][documents]") {
  const auto docs = DocumentLayout<Cpu>::from_lengths({{3, 1, 4}, {5, 3}});
  CHECK((docs.batch == 2 && docs.seq == 8));
  CHECK(docs.doc_ids.to_host() == std::vector<std::int32_t>{1, 1, 1, 2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 2, 2, 2});
  CHECK(docs.positions.to_host() == std::vector<std::int32_t>{0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 2});
  // the span table: (row, start, length) in row order, row_span_offsets cu_seqlens-style
  CHECK(docs.span_table.shape() == Shape{5, 3});
  CHECK(docs.span_table.to_host() == std::vector<std::int32_t>{0, 0, 3, 0, 3, 1, 0, 4, 4, 1, 0, 5, 1, 5, 3});
  CHECK(docs.row_span_offsets == std::vector<index_t>{0, 3, 5});
  CHECK(docs.span_count() == 5);
  // the same structure from tokens gives the same layout
  const auto from_tokens = DocumentLayout<Cpu>::from_tokens({0, 5, 5, 0, 0, 6, 6, 6, 0, 7, 7, 7, 7, 0, 8, 8}, 2, 8, 0);
  CHECK(from_tokens.doc_ids.to_host() == docs.doc_ids.to_host());
  CHECK(from_tokens.span_table.to_host() == docs.span_table.to_host());

  // padding: tokens in no span get doc id -1 and position 0; a row may be all padding
  const auto padded = DocumentLayout<Cpu>::from_spans(3, 6, {{{1, 2}, {4, 2}}, {}, {{0, 6}}});
  CHECK(padded.doc_ids.to_host() ==
        std::vector<std::int32_t>{-1, 1, 1, -1, 2, 2, -1, -1, -1, -1, -1, -1, 1, 1, 1, 1, 1, 1});
  CHECK(padded.positions.to_host() == std::vector<std::int32_t>{0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5});
  CHECK(padded.row_span_offsets == std::vector<index_t>{0, 2, 2, 3});
  CHECK_NOTHROW(padded.check_spans("test"));
  const auto no_spans = DocumentLayout<Cpu>::from_spans(1, 4, {{}});
  CHECK(no_spans.span_table.shape() == Shape{0, 3});

  CHECK_THROWS_WITH(DocumentLayout<Cpu>::from_spans(1, 6, {{{0, 3}, {2, 2}}}), Contains("row 0: document span [2, 4)"));
  CHECK_THROWS_WITH(DocumentLayout<Cpu>::from_spans(1, 6, {{{4, 3}}}), Contains("leaves [0, 6)"));
  CHECK_THROWS_WITH(DocumentLayout<Cpu>::from_spans(2, 6, {{{0, 6}}}), Contains("spans given for 1 rows, batch is 2"));
  CHECK_THROWS_WITH(DocumentLayout<Cpu>::from_lengths({{3, 2}, {4}}), Contains("row 1 holds 4 tokens but row 0 holds 5"));
  CHECK_THROWS_WITH(DocumentLayout<Cpu>::from_lengths({{3, 0}}), Contains("document lengths must be positive, got 0"));
  // spans edited after the layout was built no longer say what the span table says: refused
  auto edited = docs;
  edited.spans[0].push_back({7, 1});
  edited.spans[0][2].length = 3;
  CHECK_THROWS_WITH(edited.check_spans("op"), Contains("row 0's spans were edited after the layout was built"));
  // an edit that keeps every row's count (a shortened or moved document) is refused too: the
  // backends' plans, derived from the built spans, would no longer match
  auto shortened = docs;
  shortened.spans[1][0].length -= 1;
  CHECK_THROWS_WITH(shortened.check_spans("op"), Contains("row 1's spans were edited after the layout was built"));
  auto moved = docs;
  moved.spans[0][2].start += 1;
  moved.spans[0][2].length -= 1;
  CHECK_THROWS_WITH(moved.check_spans("op"), Contains("row 0's spans were edited after the layout was built"));
  CHECK_NOTHROW(DocumentLayout<Cpu>(docs).check_spans("op"));  // a copy carries what it was built from
}

TEST_CASE("kernels::starts_document and tap_reads_document: the one rule every doc-aware kernel uses", "[nn][documents]") {
  const std::int32_t ids[] = {1, 1, 2, 2, 2, 3};
  CHECK(kernels::starts_document(ids, 0));
  CHECK_FALSE(kernels::starts_document(ids, 1));
  CHECK(kernels::starts_document(ids, 2));
  CHECK(kernels::starts_document(ids, 5));
  // width 4: token 4 reads tokens 1..4; only 2..4 are its document's
  CHECK_FALSE(kernels::tap_reads_document(ids, 4, 0, 4));
  CHECK(kernels::tap_reads_document(ids, 4, 1, 4));
  CHECK(kernels::tap_reads_document(ids, 4, 3, 4));
  CHECK_FALSE(kernels::tap_reads_document(ids, 1, 1, 4));  // before the row
  // padding (id -1, from_spans): a run of padding reads itself, never the padding on the far side
  // of a document, although the ids at both ends are -1
  const std::int32_t padded[] = {-1, 1, 1, -1, -1, 2};
  CHECK_FALSE(kernels::tap_reads_document(padded, 3, 0, 4));  // token 0, across document 1
  CHECK_FALSE(kernels::tap_reads_document(padded, 4, 0, 5));
  CHECK(kernels::tap_reads_document(padded, 4, 2, 4));  // token 3, the same run
  CHECK(kernels::tap_reads_document(padded, 3, 3, 4));  // itself
  CHECK_FALSE(kernels::tap_reads_document(padded, 5, 2, 4));  // document 2 reads no padding
  // first_tap_in_document and last_output_reading (the kernels' one walk per element) against
  // the rule's definition, over rows of documents and padding runs, every width up to 6
  const std::vector<std::vector<std::int32_t>> rows{{1, 1, 2, 2, 2, 3}, {-1, 1, 1, -1, -1, 2, -1, 3, 3, 3},
                                                     {-1, -1, -1, -1}, {0, 0, 0, 1, -1, 2, 2}, {4}};
  for (const std::vector<std::int32_t>& row : rows) {
    const auto seq = static_cast<index_t>(row.size());
    for (index_t width = 1; width <= 6; ++width)
      for (index_t t = 0; t < seq; ++t) {
        // tap j reads token src iff src >= 0 and every token in (src, t] continues src's run
        const auto reads = [&](index_t src, index_t out) {
          if (src < 0) return false;
          for (index_t u = src + 1; u <= out; ++u)
            if (row[static_cast<std::size_t>(u)] != row[static_cast<std::size_t>(u - 1)]) return false;
          return true;
        };
        index_t first = width;
        for (index_t j = width - 1; j >= 0 && reads(t - (width - 1) + j, t); --j) first = j;
        INFO("row of " << seq << ", width " << width << ", token " << t);
        CHECK(kernels::first_tap_in_document(row.data(), t, width) == first);
        for (index_t j = 0; j < width; ++j) CHECK(kernels::tap_reads_document(row.data(), t, j, width) == (j >= first));
        index_t last = t;
        while (last + 1 < seq && last + 1 <= t + width - 1 && reads(t, last + 1)) ++last;
        CHECK(kernels::last_output_reading(row.data(), t, width, seq) == last);
      }
  }
  // same_document: two padding tokens only within one run
  const auto layout = DocumentLayout<Cpu>::from_spans(1, 6, {{{1, 2}, {5, 1}}});  // ids -1 1 1 -1 -1 2
  CHECK(layout.same_document(0, 3, 4));
  CHECK_FALSE(layout.same_document(0, 0, 3));
  CHECK(layout.same_document(0, 1, 2));
  CHECK_FALSE(layout.same_document(0, 2, 3));
}

namespace {
// A feed-forward that adds an auxiliary loss: mean(y^2) of its output, with its own weight.
struct PenalisedFeedForward {
  using value_type = double;
  using backend_type = Cpu;
  Linear<double, Cpu> w;
  double weight = 0.5;
  Var<double, Cpu> forward(const Var<double, Cpu>& x, AuxLosses<double, Cpu>& aux) const {
    Var<double, Cpu> y = w.forward(x);
    aux.add("penalty", mean(y * y), weight);
    return y;
  }
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") { w.for_each_param(visit, child_name(prefix, "w")); }
};
static_assert(Mixer<ProjectionMixer> && FeedForward<MLP<double, Cpu>> && FeedForward<PenalisedFeedForward>);
static_assert(!Mixer<MLP<double, Cpu>> && !FeedForward<ProjectionMixer>, "the concepts tell the two kinds apart");
}  // namespace

TEST_CASE("Block: NoMixer and NoFeedForward drop a residual branch; auxiliary losses reach the collector", "[nn][block]") {
  Rng rng(6);
  const auto docs = DocumentLayout<Cpu>::single_document(2, 3);
  const auto x = random_param({2, 3, 6}, 7);
  MLP<double, Cpu> mlp(6, rng);
  mlp.proj.weight.var.mutable_value().assign(randn<double, Cpu>({6, 24}, rng, 0.2));
  const ProjectionMixer mixer{Linear<double, Cpu>(6, 6, rng)};

  // a feed-forward-only block is x + ffn(RMSNorm(x)), bit for bit, and visits only the ffn
  Block<NoMixer<double, Cpu>, MLP<double, Cpu>> ffn_only{{}, mlp};
  const auto expected_ffn = x + mlp.forward(rmsnorm(x, 1e-6));
  CHECK(ffn_only.forward(x, docs).value().to_host() == expected_ffn.value().to_host());
  std::vector<std::string> names;
  ffn_only.for_each_param([&](const std::string& n, Param<double, Cpu>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"ffn.fc.weight", "ffn.proj.weight"});
  // a mixer-only block is x + mixer(RMSNorm(x))
  Block<ProjectionMixer, NoFeedForward<double, Cpu>> mixer_only{mixer, {}};
  const auto expected_mixer = x + mixer.forward(rmsnorm(x, 1e-6), docs);
  CHECK(mixer_only.forward(x, docs).value().to_host() == expected_mixer.value().to_host());

  // auxiliary losses: with a collector the block hands it to the feed-forward; without one the
  // loss is computed and dropped; the output is the same either way
  Block<ProjectionMixer, PenalisedFeedForward> block{mixer, PenalisedFeedForward{Linear<double, Cpu>(6, 6, rng), 0.25}};
  AuxLosses<double, Cpu> aux;
  const auto y = block.forward(x, docs, aux);
  REQUIRE(aux.entries().size() == 1);
  CHECK(aux.entries()[0].name == "ffn.penalty");  // the block scopes its parts' names
  CHECK(aux.entries()[0].weight == 0.25);
  CHECK(y.value().to_host() == block.forward(x, docs).value().to_host());
  const auto main = sum(y);
  const auto total = aux.add_to(main);
  CHECK(total.item() == main.item() + 0.25 * aux.entries()[0].loss.item());
  require_gradcheck("block with an auxiliary loss", [&](auto& in) {
    AuxLosses<double, Cpu> a;
    return a.add_to(sum(block.forward(in[0], docs, a)));
  }, {x, block.ffn.w.weight.var});
  // no auxiliary loss: the total is the main loss itself (the same Var, the same bits)
  CHECK(AuxLosses<double, Cpu>().add_to(main).id() == main.id());

  CHECK_THROWS_WITH(aux.add("ffn.penalty", main, 1.0), Contains("auxiliary loss 'ffn.penalty' was added twice"));
  {
    const AuxLosses<double, Cpu>::Scope outer(aux, "blocks.3");
    const AuxLosses<double, Cpu>::Scope inner(aux, "ffn");
    aux.add("penalty", main, 1.0);  // the same part name in another layer is another entry
    CHECK(aux.scope() == "blocks.3.ffn");
  }
  CHECK(aux.scope().empty());
  CHECK(aux.entries().back().name == "blocks.3.ffn.penalty");
  CHECK_THROWS_WITH(aux.add("neg", main, -1.0), Contains("has weight -1: weights are finite and >= 0"));
  CHECK_THROWS_WITH(aux.add("vector", y, 1.0), Contains("auxiliary loss 'vector' must be a scalar, got shape (2, 3, 6)"));
}
