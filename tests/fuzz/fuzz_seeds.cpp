// Writes the fuzzers' seed corpora with the project's own writers: fuzz_seeds OUT_DIR creates
//   OUT_DIR/safetensors/  files from SafetensorsWriter (every dtype megacpp stores, metadata,
//                         a scalar, an empty file)
//   OUT_DIR/shard/        token shards from write_shard (byte-tokenized documents, FIM examples,
//                         a version-2 shard with ids above 65,535)
//   OUT_DIR/json/         the JSON headers of those safetensors files, and json_quote output
//   OUT_DIR/tokenizer/    tokenizer.json files in the GPT-2 and Llama-3 styles, spelled with
//                         the tokenizer's own ByteLevel table (detail::bytes_to_byte_level)
// Plain C++ (no sanitizer, no libFuzzer): scripts/fuzz.sh builds and runs it before the fuzzers.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"
#include "megacpp/data/fim.hpp"
#include "megacpp/data/shard.hpp"
#include "megacpp/data/tokenizer.hpp"
#include "megacpp/io/safetensors.hpp"

namespace fs = std::filesystem;
using namespace megacpp;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  check(static_cast<bool>(out), "fuzz_seeds", "cannot write ", p.string());
}

template <class T>
Tensor<T, Cpu> counting(const Shape& shape) {
  std::vector<T> host(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<T>(static_cast<float>(i % 7) * 0.5f);
  return Tensor<T, Cpu>::from_host(shape, host);
}

void safetensors_seeds(const fs::path& dir, const fs::path& json_dir) {
  std::vector<std::pair<std::string, io::SafetensorsWriter>> files(4);
  files[0].first = "all_dtypes";
  files[0].second.add("embed.weight", counting<float>({4, 3}));
  files[0].second.add("norm.gain", counting<double>({3}));
  files[0].second.add("lm_head.bf16", counting<bf16>({2, 2}));
  files[0].second.add("lm_head.f16", counting<f16>({1, 2, 2}));
  files[0].second.add("step", counting<std::int32_t>({1}));
  files[0].second.add("mask", counting<std::uint8_t>({5}));
  files[0].second.set_metadata("megacpp.model", "TinyLM d=3 \"quoted\" \\ back\tslash");
  files[1].first = "scalar_and_metadata";
  files[1].second.add("loss_scale", counting<float>(Shape{}));
  files[1].second.set_metadata("format", "pt");
  files[1].second.set_metadata("note", "caf\xC3\xA9 \xE6\x9D\xB1");
  files[2].first = "metadata_only";
  files[2].second.set_metadata("megacpp.model", "none");
  files[3].first = "empty";
  for (const auto& [name, writer] : files) {
    const fs::path file = dir / (name + ".safetensors");
    writer.write(file);
    const std::string bytes = read_bytes(file);
    std::uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
    write_text(json_dir / ("header_" + name + ".json"), bytes.substr(8, header));
  }
}

void json_seeds(const fs::path& dir) {
  // Every ASCII byte, then UTF-8 of each length up to U+10FFFF (json_quote refuses invalid UTF-8).
  std::string every_byte;
  for (int c = 1; c < 128; ++c) every_byte += static_cast<char>(c);
  every_byte += "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF";  // é € 😀 U+10FFFF
  write_text(dir / "quoted_bytes.json", "{" + io::json_quote("s") + ":" + io::json_quote(every_byte) + "}");
  write_text(dir / "nested.json",
             "[[1,[-2,{" + io::json_quote("a") + ":null," + io::json_quote("b") + ":true," + io::json_quote("") +
                 ":false}]],9223372036854775807,-9223372036854775808,\"\\ud83d\\ude42\\u00e9\\/\"]");
}

void shard_seeds(const fs::path& dir) {
  const data::ByteTokenizer bytes;
  const std::vector<std::string> docs = {"// a comment\nint main() { return 0; }\n", "hello world", "x"};
  std::vector<std::uint32_t> plain, fim;
  Rng rng(7);
  for (const auto& d : docs) {
    const auto ids = bytes.encode_document(d);
    plain.insert(plain.end(), ids.begin(), ids.end());
    const auto rewritten = data::fim_transform(ids, bytes.special(), data::FimConfig{1.0, 0.5}, rng);
    fim.insert(fim.end(), rewritten.tokens.begin(), rewritten.tokens.end());
  }
  data::write_shard(dir / "documents.bin", plain);
  data::write_shard(dir / "fim.bin", fim);
  std::vector<std::uint32_t> wide = {70000, 1, 65535, 65536, 3, 100000, 2, 0};
  data::write_shard(dir / "version2.bin", wide);
  data::write_shard(dir / "two_tokens.bin", std::vector<std::uint32_t>{256, 65});
}

// A byte-level tokenizer.json: the 256 single bytes, `merges` (raw bytes, in rank order), the
// special tokens BpeSpecialNames expects as added tokens.
nlohmann::json tokenizer(const std::vector<std::pair<std::string, std::string>>& merges, bool llama3_style) {
  using nlohmann::json;
  const auto spell = [](const std::string& raw) { return data::detail::bytes_to_byte_level(raw); };
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  std::int32_t next = 256;
  for (const auto& [left, right] : merges) {
    vocab[spell(left + right)] = next++;
    if (llama3_style) merge_list.push_back(json::array({spell(left), spell(right)}));
    else merge_list.push_back(spell(left) + " " + spell(right));
  }
  json added = json::array();
  const data::BpeSpecialNames names;
  for (const std::string& content : {names.bos, names.fim_prefix, names.fim_suffix, names.fim_middle})
    added.push_back({{"id", next++}, {"content", content}, {"special", true}});
  added.push_back({{"id", next++}, {"content", "<sep>"}, {"special", false}});
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", !llama3_style}, {"trim_offsets", true},
                           {"use_regex", !llama3_style}};
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = llama3_style ? json{{"type", "Sequence"}, {"pretokenizers", json::array({byte_level})}} : byte_level;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", llama3_style}, {"vocab", vocab}, {"merges", merge_list}};
  return j;
}

void tokenizer_seeds(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "t"}, {"i", "n"}, {"in", "t"}, {" ", "int"}, {"r", "e"}, {" t", "h"}, {" th", "e"}, {"1", "2"}};
  write_text(dir / "gpt2_style.json", tokenizer(merges, false).dump(2));
  write_text(dir / "llama3_style.json", tokenizer(merges, true).dump());
  // The seeds must load: a seed the loader refuses only teaches the fuzzer the error paths.
  for (const char* name : {"gpt2_style.json", "llama3_style.json"}) data::BpeTokenizer::from_file(dir / name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR  (writes OUT_DIR/{safetensors,shard,json,tokenizer}/)\n");
    return 2;
  }
  try {
    const fs::path out = argv[1];
    for (const char* sub : {"safetensors", "shard", "json", "tokenizer"}) fs::create_directories(out / sub);
    safetensors_seeds(out / "safetensors", out / "json");
    json_seeds(out / "json");
    shard_seeds(out / "shard");
    tokenizer_seeds(out / "tokenizer");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
