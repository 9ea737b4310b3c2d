// The tools on BPE shards end to end: megacpp-prepare --tokenizer writes them, megacpp-train
// trains the tiny model on them and samples with --tokenizer, megacpp-generate encodes its prompt
// and decodes its samples with the same tokenizer.json; both refuse another file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/temp_dir.hpp"
#include "megacpp/data/bpe_pieces.hpp"
#include "megacpp/data/shard.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp::testing;
namespace fs = std::filesystem;

namespace {
// A byte-level BPE of exactly 264 ids (the tiny model's vocabulary): the 256 bytes, 4 merges of
// C-like text and StarCoder's 4 special tokens. `other_bytes` changes the file (and so its fingerprint) only.
std::string tiny_tokenizer_json(bool other_bytes = false) {
  using megacpp::data::detail::bytes_to_byte_level;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  const char* merges[][2] = {{"i", "n"}, {"in", "t"}, {" ", "int"}, {";", "\n"}};
  nlohmann::json merge_list = nlohmann::json::array();
  int id = 256;
  for (const auto& m : merges) {
    const std::string left = bytes_to_byte_level(m[0]), right = bytes_to_byte_level(m[1]);
    vocab[left + right] = id++;
    merge_list.push_back(left + " " + right);
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}}, {{"id", 261}, {"content", "<fim_prefix>"}, {"special", true}},
        {{"id", 262}, {"content", "<fim_suffix>"}, {"special", true}}, {{"id", 263}, {"content", "<fim_middle>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
  if (other_bytes) j["model"]["ignore_merges"] = false;  // the same tokenization, another file
  return j.dump();
}

// Names other than megacpp-prepare's (its default, StarCoder's): BOS on the FIM prefix sentinel.
const std::string kOtherNames = "<fim_prefix>,<|endoftext|>,<fim_prefix>,<fim_suffix>,<fim_middle>";
}  // namespace

TEST_CASE("tools on BPE shards: prepare, train, generate with the same tokenizer.json", "[tools][bpe]") {
  TempDir dir;
  fs::create_directories(dir / "src");
  for (int f = 0; f < 40; ++f) {
    std::ofstream src(dir / "src" / ("f" + std::to_string(f) + ".cpp"));
    for (int l = 0; l < 200; ++l) src << "int value_" << l << " = " << (l * 7 + f) % 100 << ";\n";
  }
  std::ofstream(dir / "tok.json") << tiny_tokenizer_json();
  std::ofstream(dir / "other.json") << tiny_tokenizer_json(true);

  const auto prepared = run(kPrepare, {"--input", (dir / "src").string(), "--output", (dir / "shards").string(),
                                       "--tokenizer", (dir / "tok.json").string(), "--val_fraction", "0.3"},
                            dir, "prepare.log");
  INFO(prepared.output);
  REQUIRE(prepared.exit_code == 0);
  const auto trained = run(kTrain,
                           small_run(dir / "shards", dir / "run",
                                     {"--steps", "3", "--val_tokens", "128", "--sample_tokens", "8", "--tokenizer",
                                      (dir / "tok.json").string(), "--prompt", "int y"}),
                           dir, "train.log");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  CHECK_THAT(trained.output, Catch::Contains("bpe tokenizer, BOS 260") && Catch::Contains("sample (temperature") &&
                                 Catch::Contains("\nint y"));
  // SFT on the BPE shards: the examples are encoded with the same tokenizer.json (needed, and checked).
  {
    std::ofstream sft(dir / "sft.jsonl");
    for (int i = 0; i < 25; ++i)
      sft << R"({"prompt": "// )" << i << R"(\nint f() {\n", "response": "  return )" << i << R"(;\n}\n"})" << "\n";
  }
  const auto tuned = run(kTrain,
                         small_run(dir / "shards", dir / "sft", {"--init", (dir / "run").string(), "--sft",
                                                                 (dir / "sft.jsonl").string(), "--steps", "3",
                                                                 "--tokenizer", (dir / "tok.json").string()}),
                         dir, "sft.log");
  INFO(tuned.output);
  CHECK(tuned.exit_code == 0);
  CHECK_THAT(tuned.output, Catch::Contains("SFT: 24 training examples"));
  const auto untokenized = run(kTrain,
                               small_run(dir / "shards", dir / "sft2", {"--init", (dir / "run").string(), "--sft",
                                                                        (dir / "sft.jsonl").string(), "--steps", "3"}),
                               dir, "sft2.log");
  CHECK(untokenized.exit_code == 2);
  CHECK_THAT(untokenized.output, Catch::Contains("needs its tokenizer.json (--tokenizer) to encode the examples"));
  const auto other_sample = run(kTrain,
                                small_run(dir / "shards", dir / "run2",
                                          {"--steps", "3", "--tokenizer", (dir / "other.json").string()}),
                                dir, "train2.log");
  CHECK(other_sample.exit_code == 1);  // checked before any training
  CHECK_THAT(other_sample.output, Catch::Contains("is not the tokenizer the model's shards were written with"));

  const std::vector<std::string> base{"--checkpoint", (dir / "run").string(), "--tokens", "8", "--prompt", "int x = 1;",
                                      "--temperature", "0", "--verify"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const auto generated = run(kGenerate, with({"--tokenizer", (dir / "tok.json").string()}), dir, "generate.log");
  INFO(generated.output);
  CHECK(generated.exit_code == 0);
  CHECK_THAT(generated.output, Catch::StartsWith("int x = 1;") && Catch::Contains("cached decoding == full forward"));

  const auto missing = run(kGenerate, base, dir, "missing.log");
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("was trained on BPE shards") && Catch::Contains("pass their tokenizer.json"));
  const auto other = run(kGenerate, with({"--tokenizer", (dir / "other.json").string()}), dir, "other.log");
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Catch::Contains("is not the tokenizer the model's shards were written with"));
  const auto names =
      run(kGenerate, with({"--tokenizer", (dir / "tok.json").string(), "--special_tokens", kOtherNames}), dir, "names.log");
  CHECK(names.exit_code == 1);
  CHECK_THAT(names.output, Catch::Contains("(BOS 261, EOS 260) other than the shards' (BOS 260, EOS 260)"));
}

TEST_CASE("megacpp-prepare on BPE shards: structured FIM through the tokenizer's byte offsets", "[tools][bpe][fim]") {
  TempDir dir;
  fs::create_directories(dir / "src");
  for (int f = 0; f < 40; ++f) {  // each file: a documented function, then more code
    std::ofstream src(dir / "src" / ("f" + std::to_string(f) + ".cpp"));
    src << "// Returns the value " << f << ".\nint value_" << f << "() {\n  int v = " << f << ";\n  return v;\n}\n";
    for (int l = 0; l < 50; ++l) src << "int other_" << l << " = " << l << ";\n";
  }
  std::ofstream(dir / "tok.json") << tiny_tokenizer_json();
  const auto prepared = run(kPrepare, {"--input", (dir / "src").string(), "--output", (dir / "shards").string(),
                                       "--tokenizer", (dir / "tok.json").string(), "--val_fraction", "0.1",
                                       "--fim_rate", "1", "--fim_structured", "1"},
                            dir, "prepare.log");
  INFO(prepared.output);
  REQUIRE(prepared.exit_code == 0);
  // Every training file is FIM'd the structured way, half doc->code and half code->doc (roughly).
  CHECK_THAT(prepared.output, Catch::Contains(" 0 plain, 0 random") && Catch::Contains("had a documented function"));
  const megacpp::data::TokenShard shard(dir / "shards" / "train_000000.bin");
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(shard.size()));
  shard.read(0, tokens, 264);
  const auto count = [&](std::int32_t id) { return std::count(tokens.begin(), tokens.end(), id); };
  // <fim_prefix>, <fim_suffix> and <fim_middle> once per document: every training file was split
  const auto documents = count(261);
  CHECK(documents >= 30);
  CHECK(count(262) == documents);
  CHECK(count(263) == documents);
}
