// SFT examples (data/sft.hpp): the JSONL shapes and their errors, the prompt masked out of the loss
// on hand-made examples, packing of whole examples, truncation, per-epoch shuffles from the seed
// and resume from a saved position.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/data/sft.hpp"

using namespace megacpp;
using namespace megacpp::data;
using Catch::Matchers::Contains;

namespace {
std::vector<std::int32_t> bytes_of(const std::string& text) {
  std::vector<std::int32_t> ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

SftExample byte_example(const std::string& prompt, const std::string& response) {
  return make_sft_example(SftRecord{prompt, response}, bytes_of, SpecialTokens{});
}

SftRecord record_of(const std::string& json) { return sft_record(io::parse_json(json, "test"), "test"); }

struct Row {
  std::vector<std::int32_t> input, target;
  std::vector<float> mask;
};
Row next_row(SftPacker& packer, index_t seq) {
  Row r{std::vector<std::int32_t>(seq), std::vector<std::int32_t>(seq), std::vector<float>(seq)};
  packer.next_row(r.input.data(), r.target.data(), r.mask.data(), SpecialTokens{}.eos);
  return r;
}
// The learned targets of a row as text.
std::string learned(const Row& r) {
  std::string out;
  for (std::size_t i = 0; i < r.mask.size(); ++i)
    if (r.mask[i] != 0) out += r.target[i] < 256 ? std::string(1, static_cast<char>(r.target[i])) : "<EOS>";
  return out;
}
}  // namespace

TEST_CASE("sft: the record shapes and their renderings", "[data][sft]") {
  const SftRecord a = record_of(R"({"prompt": "int f() {\n", "response": "  return 1;\n}\n", "test": "x"})");
  CHECK(a.prompt == "int f() {\n");
  CHECK(a.response == "  return 1;\n}\n");
  const SftRecord b = record_of(R"({"instruction": "say hi", "completion": "hi"})");
  CHECK(b.prompt == "say hi");
  CHECK(b.response == "hi");
  const SftRecord edit = record_of(R"({"instruction": "fix it", "before": "int x = 1", "after": "int x = 1;\n"})");
  CHECK(edit.prompt == "// Before:\nint x = 1\n// Instruction: fix it\n// After:\n");
  CHECK(edit.response == "int x = 1;\n");
  const SftRecord diff = record_of(R"({"instruction": "i", "before": "a\n", "diff": "-a\n+b\n"})");
  CHECK(diff.prompt == "// Before:\na\n// Instruction: i\n// Diff:\n");
  CHECK(diff.response == "-a\n+b\n");
}

TEST_CASE("sft: malformed records are refused with the line named", "[data][sft]") {
  CHECK_THROWS_WITH(record_of(R"([1, 2])"), Contains("not a JSON object"));
  CHECK_THROWS_WITH(record_of(R"({"prompt": "p"})"), Contains("\"response\" or \"completion\""));
  CHECK_THROWS_WITH(record_of(R"({"prompt": "p", "instruction": "i", "response": "r"})"), Contains("exactly one"));
  CHECK_THROWS_WITH(record_of(R"({"prompt": 3, "response": "r"})"), Contains("\"prompt\" is not a string"));
  CHECK_THROWS_WITH(record_of(R"({"prompt": "p", "response": ""})"), Contains("response is empty"));
  CHECK_THROWS_WITH(record_of(R"({"instruction": "i", "before": "b"})"), Contains("one of \"after\" or \"diff\""));
  testing::TempDir dir;
  {
    std::ofstream f(dir / "bad.jsonl");
    f << R"({"prompt": "p", "response": "r"})" << "\n\n" << R"({"prompt": "p", "response": "r",})" << "\n";
  }
  CHECK_THROWS_WITH(read_sft_file(dir / "bad.jsonl"), Contains("bad.jsonl:3"));
  { std::ofstream f(dir / "empty.jsonl"); f << "\n \n"; }
  CHECK_THROWS_WITH(read_sft_file(dir / "empty.jsonl"), Contains("holds no example"));
  {
    std::ofstream f(dir / "good.jsonl");
    f << R"({"prompt": "p", "response": "r"})" << "\n" << R"({"instruction": "i", "response": "s"})";
  }
  CHECK(read_sft_file(dir / "good.jsonl").size() == 2);
}

TEST_CASE("sft: only the response and EOS are learned, and examples pack whole", "[data][sft]") {
  // Two examples of 1 + 3 + 2 + 1 = 7 tokens: both fit a row of 16 positions (17 tokens); the
  // third row position after them is EOS padding with no loss.
  std::vector<SftExample> examples{byte_example("ab:", "xy"), byte_example("cd:", "zw")};
  SftPacker packer(examples, 16, /*seed=*/1, /*shuffle=*/false);
  const Row r = next_row(packer, 16);
  CHECK(learned(r) == "xy<EOS>zw<EOS>");
  const SpecialTokens s;
  CHECK(r.input[0] == s.bos);
  CHECK(r.input[7] == s.bos);  // the second example is its own document
  CHECK(r.target[0] == 'a');
  CHECK(r.mask[0] == 0);  // BOS -> 'a': the prompt's tokens are given, not learned
  CHECK(r.mask[2] == 0);  // 'b' -> ':'
  CHECK(r.mask[3] == 1);  // ':' -> 'x', the first response token
  for (index_t i = 13; i < 16; ++i) {
    CHECK(r.target[static_cast<std::size_t>(i)] == s.eos);
    CHECK(r.mask[static_cast<std::size_t>(i)] == 0);
  }
  CHECK(packer.position() == SftPosition{1, 0});
}

TEST_CASE("sft: an example that does not fit starts the next row; a long one is cut", "[data][sft]") {
  std::vector<SftExample> examples{byte_example("p:", "abcd"), byte_example("q:", "0123456789")};
  SftPacker packer(examples, 8, 1, false);
  CHECK(packer.truncated() == 1);  // 1 + 2 + 10 + 1 = 14 tokens > 9
  const Row first = next_row(packer, 8);
  CHECK(learned(first) == "abcd<EOS>");
  const Row second = next_row(packer, 8);
  CHECK(learned(second) == "012345");  // cut at the row's end
  CHECK_THROWS_WITH(SftPacker({byte_example("a prompt longer than the row", "r")}, 8, 1),
                    Contains("its prompt alone"));
}

TEST_CASE("sft: the order is shuffled per epoch from the seed and resumes exactly", "[data][sft]") {
  std::vector<SftExample> examples;
  for (int i = 0; i < 40; ++i) examples.push_back(byte_example("p" + std::to_string(i) + ":", "r" + std::to_string(i)));
  const auto rows_of = [&](std::uint64_t seed, int count) {
    SftPacker packer(examples, 12, seed);
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) out.push_back(learned(next_row(packer, 12)));
    return out;
  };
  const auto a = rows_of(7, 100), b = rows_of(7, 100), c = rows_of(8, 100);
  CHECK(a == b);
  CHECK(a != c);
  // One row per example (12 positions hold one of them); an epoch visits each example once.
  std::set<std::string> epoch0(a.begin(), a.begin() + 40), epoch1(a.begin() + 40, a.begin() + 80);
  CHECK(epoch0.size() == 40);
  CHECK(epoch1 == epoch0);
  CHECK(std::vector<std::string>(a.begin(), a.begin() + 40) != std::vector<std::string>(a.begin() + 40, a.begin() + 80));
  // Resume: a packer seeked to the position after 53 rows gives the rest of the rows.
  SftPacker first(examples, 12, 7);
  for (int i = 0; i < 53; ++i) next_row(first, 12);
  SftPacker resumed(examples, 12, 7);
  resumed.seek(first.position());
  for (int i = 53; i < 100; ++i) CHECK(learned(next_row(resumed, 12)) == a[static_cast<std::size_t>(i)]);
  CHECK_THROWS_WITH(resumed.seek(SftPosition{0, 40}), Contains("resume on the same SFT file"));
}
