// megacpp-prepare: turns directories of source files into train/val token shards.
//
// Walks each --input DIR for C/C++/CUDA sources (sorted, so the output is deterministic), tokenizes each file
// as one document (byte-level: BOS + bytes + EOS; or, with --tokenizer, a byte-level BPE
// `tokenizer.json` such as StarCoder's: BOS + BPE tokens + EOS), applies fill-in-the-middle to a
// share of the training documents (RECIPE.md: rate 0.5, a third of those structured; random only
// with --tokenizer, see below), and writes
// OUT/train_000000.bin ... and OUT/val_000000.bin in the modded-nanogpt shard format (uint16
// tokens, or uint32 in any shard holding an id above 65535: write_shard picks per shard). Files
// are assigned to val by a hash of their path, so adding a file never moves another between splits.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "common/progress_bar.hpp"
#include "megacpp/data.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace megacpp;

namespace {
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct ShardSink {
  fs::path dir;
  std::string prefix;
  std::size_t max_tokens;
  std::vector<std::uint32_t> buffer;
  int written = 0;
  std::size_t total = 0;

  void add(const std::vector<std::int32_t>& doc) {
    buffer.insert(buffer.end(), doc.begin(), doc.end());
    total += doc.size();
    if (buffer.size() >= max_tokens) flush();
  }
  void flush() {
    if (buffer.empty()) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", prefix.c_str(), written++);
    data::write_shard(dir / name, buffer);
    buffer.clear();
  }
};
}  // namespace

int main(int argc, char** argv) {
  po::options_description opts("megacpp-prepare: source directory -> train/val token shards\nOptions");
  std::vector<std::string> inputs;
  std::string output;
  double val_fraction = 0.05, fim_rate = 0.5;
  std::uint64_t seed = 0;
  std::size_t shard_tokens = 16u << 20;
  std::string tokenizer_path, special_names = "<|endoftext|>,<|endoftext|>,<fim_prefix>,<fim_suffix>,<fim_middle>";
  opts.add_options()("help,h", "show this help")
      ("input,i", po::value(&inputs)->required()->composing(),
       "directory to walk for .h .hpp .c .cc .cpp .cu .cuh files (repeat for several)")
      ("output,o", po::value(&output)->required(), "directory for train_*.bin and val_*.bin shards")
      ("val_fraction", po::value(&val_fraction)->default_value(val_fraction, "0.05"), "share of files (by path hash) kept for validation")
      ("fim_rate", po::value(&fim_rate)->default_value(fim_rate), "probability a training file becomes a FIM example")
      ("shard_tokens", po::value(&shard_tokens)->default_value(shard_tokens), "tokens per shard (the last may be smaller)")
      ("seed", po::value(&seed)->default_value(seed), "seed of the FIM transform")
      ("tokenizer", po::value(&tokenizer_path), "byte-level BPE tokenizer.json (default: the byte tokenizer, vocab 261)")
      ("special_tokens", po::value(&special_names)->default_value(special_names),
       "with --tokenizer: the added tokens used as BOS,EOS,FIM prefix,FIM suffix,FIM middle");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::printf("%s\n", (std::ostringstream() << opts).str().c_str());
      return 0;
    }
    po::notify(vm);
    for (const auto& input : inputs)
      check(fs::is_directory(input), "megacpp-prepare", "input directory ", input, " does not exist");
    check(val_fraction >= 0 && val_fraction < 1, "megacpp-prepare", "val_fraction must be in [0, 1), got ", val_fraction);

    const std::set<std::string> extensions{".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh"};
    // (path, name): the name decides the split, so it must not depend on where the tree sits: the
    // path relative to its input directory, prefixed by that directory's name when there are several.
    std::vector<std::pair<fs::path, std::string>> files;
    for (const auto& input : inputs) {
      const fs::path prefix = inputs.size() > 1 ? fs::path(input).lexically_normal().filename() : fs::path();
      for (const auto& e : fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied))
        if (e.is_regular_file() && extensions.count(e.path().extension().string()))
          files.emplace_back(e.path(), (prefix / fs::relative(e.path(), input)).generic_string());
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return fs::path(a.second) < fs::path(b.second); });
    check(!files.empty(), "megacpp-prepare", "no source files under ", inputs.front(), inputs.size() > 1 ? " and the other inputs" : "");

    // The BPE option: special tokens by name; structured FIM is off because its docstring finder
    // (fim.hpp leading_comment_end) reads byte ids, which BPE ids are not. Random FIM is unchanged.
    data::ByteTokenizer byte_tokenizer;
    std::optional<data::BpeTokenizer> bpe;
    data::FimConfig fim{fim_rate};
    if (!tokenizer_path.empty()) {
      std::vector<std::string> names;
      std::stringstream list(special_names);
      for (std::string name; std::getline(list, name, ',');) names.push_back(name);
      check(names.size() == 5, "megacpp-prepare", "--special_tokens needs 5 comma-separated names (BOS,EOS,PRE,SUF,MID), got ",
            names.size(), ": ", special_names);
      bpe = data::BpeTokenizer::from_file(tokenizer_path, data::BpeSpecialNames{names[0], names[1], names[2], names[3], names[4]});
      fim.structured_share = 0.0;
      std::printf("megacpp-prepare: BPE tokenizer %s: vocab %d, %zu merges, %zu added tokens; structured FIM off\n",
                  tokenizer_path.c_str(), bpe->vocab_size(), bpe->num_merges(), bpe->num_added_tokens());
    }
    const data::SpecialTokens special = bpe ? bpe->special() : byte_tokenizer.special();

    fs::create_directories(output);
    Rng rng(seed);
    ShardSink train{output, "train", shard_tokens, {}, 0, 0}, val{output, "val", shard_tokens, {}, 0, 0};
    examples::ProgressBar bar("prepare", static_cast<double>(files.size()), "files");
    std::size_t n = 0;
    for (const auto& [path, rel] : files) {
      std::ifstream in(path, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const bool is_val = static_cast<double>(fnv1a(rel) % 10000) < val_fraction * 10000;
      const auto doc = bpe ? bpe->encode_document(text) : byte_tokenizer.encode_document(text);
      if (is_val) val.add(doc);
      else train.add(data::fim_transform(doc, special, fim, rng));
      bar.update(static_cast<double>(++n));
    }
    bar.finish();
    train.flush();
    val.flush();
    check(train.written > 0 && val.written > 0, "megacpp-prepare", "split left ", train.written ? "val" : "train",
          " empty: use more files or another --val_fraction");
    std::printf("megacpp-prepare: %zu files -> %zu train tokens in %d shard(s), %zu val tokens in %d shard(s) under %s\n",
                files.size(), train.total, train.written, val.total, val.written, output.c_str());
  } catch (const po::error& e) {
    std::fprintf(stderr, "megacpp-prepare: %s\n%s\n", e.what(), (std::ostringstream() << opts).str().c_str());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
