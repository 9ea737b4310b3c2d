// Byte tokenizer and fill-in-the-middle: PSM layout, structured splits, loss mask from sentinels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"
#include "megacpp/megacpp.hpp"

using namespace megacpp;
using namespace megacpp::data;

TEST_CASE("ByteTokenizer: BOS + bytes + EOS, exact round trip of any bytes", "[data][fim]") {
  ByteTokenizer tok;
  const std::string text = std::string("int main() {}\n") + '\xff' + '\0';
  const auto ids = tok.encode_document(text);
  CHECK(ids.front() == tok.special().bos);
  CHECK(ids.back() == tok.special().eos);
  CHECK(ids.size() == text.size() + 2);
  CHECK(tok.decode(std::vector<std::int32_t>(ids.begin() + 1, ids.end() - 1)) == text);
  CHECK(tok.decode({256, 97, 257}) == "<BOS>a<EOS>");
  CHECK_THROWS_WITH(tok.decode({300}), Catch::Matchers::Contains("id 300 outside the vocabulary of 261"));
}

TEST_CASE("fim_transform: PSM keeps every body token once, rate 0 keeps documents", "[data][fim]") {
  ByteTokenizer tok;
  const auto& sp = tok.special();
  const auto doc = tok.encode_document("abcdefghij");
  Rng rng(3);
  const auto same = fim_transform(doc, sp, FimConfig{0.0, 0.0}, rng);
  CHECK(same == doc);
  for (int trial = 0; trial < 50; ++trial) {
    const auto f = fim_transform(doc, sp, FimConfig{1.0, 0.0}, rng);
    REQUIRE(f.size() == doc.size() + 3);
    CHECK(f[0] == sp.bos);
    CHECK(f[1] == sp.fim_prefix);
    CHECK(f.back() == sp.eos);
    const auto suf = std::find(f.begin(), f.end(), sp.fim_suffix), mid = std::find(f.begin(), f.end(), sp.fim_middle);
    REQUIRE((suf < mid && mid != f.end()));
    // prefix + middle + suffix == body
    std::vector<std::int32_t> body(f.begin() + 2, suf);
    body.insert(body.end(), mid + 1, f.end() - 1);
    body.insert(body.end(), suf + 1, mid);
    CHECK(body == std::vector<std::int32_t>(doc.begin() + 1, doc.end() - 1));
  }
}

TEST_CASE("fim_transform: structured FIM splits at the leading comment (docstring -> body)", "[data][fim]") {
  ByteTokenizer tok;
  const auto& sp = tok.special();
  const auto doc = tok.encode_document("// Adds two ints.\nint add(int a, int b) { return a + b; }\n");
  Rng rng(1);
  const auto f = fim_transform(doc, sp, FimConfig{1.0, 1.0}, rng);
  const auto suf = std::find(f.begin(), f.end(), sp.fim_suffix), mid = std::find(f.begin(), f.end(), sp.fim_middle);
  CHECK(tok.decode(std::vector<std::int32_t>(f.begin() + 2, suf)) == "// Adds two ints.\n");
  CHECK(suf + 1 == mid);  // empty suffix
  CHECK(tok.decode(std::vector<std::int32_t>(mid + 1, f.end() - 1)) == "int add(int a, int b) { return a + b; }\n");
}

TEST_CASE("fim_loss_mask: context targets masked, middle and plain text learned", "[data][fim]") {
  const SpecialTokens sp;
  // BOS <PRE> p <SUF> s <MID> m EOS BOS x
  const std::vector<std::int32_t> stream{sp.bos, sp.fim_prefix, 'p', sp.fim_suffix, 's', sp.fim_middle, 'm', sp.eos, sp.bos, 'x', 'y'};
  const std::vector<std::int32_t> inputs(stream.begin(), stream.end() - 1), targets(stream.begin() + 1, stream.end());
  std::vector<float> mask(inputs.size());
  fim_loss_mask(inputs.data(), targets.data(), inputs.size(), FimRegion::plain, sp, mask.data());
  //           ->PRE  ->p  ->SUF ->s  ->MID ->m  ->EOS ->BOS ->x ->y
  CHECK(mask == std::vector<float>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1});
  // A row starting inside the suffix knows it is in context from the stream before it.
  std::vector<float> tail(3);
  fim_loss_mask(inputs.data() + 4, targets.data() + 4, 3, FimRegion::context, sp, tail.data());
  CHECK(tail == std::vector<float>{0, 1, 1});
}

TEST_CASE("loader: FIM mask is derived per row, including rows that start mid-example", "[data][fim]") {
  megacpp::testing::TempDir dir;
  const SpecialTokens sp;
  std::vector<std::uint32_t> stream;
  for (int rep = 0; rep < 4; ++rep)
    for (std::int32_t t : std::initializer_list<std::int32_t>{sp.bos, sp.fim_prefix, 'a', 'b', sp.fim_suffix, 'c', sp.fim_middle, 'd', 'e', sp.eos})
      stream.push_back(static_cast<std::uint32_t>(t));
  write_shard(dir / "fim.bin", stream);
  ShardLoader loader(list_shards(dir.path), 2, 5, ByteTokenizer::kVocab);
  loader.enable_fim_mask(sp);
  const auto batch = loader.next<float, Cpu>();
  // row 0 inputs: BOS PRE a b SUF -> targets PRE a b SUF c: all context
  // row 1 inputs: c MID d e EOS   -> targets MID d e EOS BOS: MID masked, the rest learned
  CHECK(batch.loss_mask_host == std::vector<float>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
}
