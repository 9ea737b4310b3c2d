// The tools on BPE shards end to end: megacpp-prepare --tokenizer writes them, megacpp-train
// trains the tiny model on them and samples with --tokenizer, megacpp-generate encodes its prompt
// and decodes its samples with the same tokenizer.json; both refuse another file.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/temp_dir.hpp"
#include "megacpp/data/bpe_pieces.hpp"
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
