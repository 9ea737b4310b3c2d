// megacpp-prepare: turns a directory of source files into train/val token shards.
//
// Walks DIR for C/C++/CUDA sources (sorted, so the output is deterministic), tokenizes each file
// as one document (byte-level: BOS + bytes + EOS), applies fill-in-the-middle to a share of the
// training documents (RECIPE.md: rate 0.5, a third of those structured), and writes
// OUT/train_000000.bin ... and OUT/val_000000.bin in the modded-nanogpt shard format. Files are
// assigned to val by a hash of their path, so adding a file never moves another between splits.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "common/progress_bar.hpp"
#include "megacpp/data.hpp"

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
  std::string input, output;
  double val_fraction = 0.05, fim_rate = 0.5;
  std::uint64_t seed = 0;
  std::size_t shard_tokens = 16u << 20;
  opts.add_options()("help,h", "show this help")
      ("input,i", po::value(&input)->required(), "directory to walk for .h .hpp .c .cc .cpp .cu .cuh files")
      ("output,o", po::value(&output)->required(), "directory for train_*.bin and val_*.bin shards")
      ("val_fraction", po::value(&val_fraction)->default_value(val_fraction, "0.05"), "share of files (by path hash) kept for validation")
      ("fim_rate", po::value(&fim_rate)->default_value(fim_rate), "probability a training file becomes a FIM example")
      ("shard_tokens", po::value(&shard_tokens)->default_value(shard_tokens), "tokens per shard (the last may be smaller)")
      ("seed", po::value(&seed)->default_value(seed), "seed of the FIM transform");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::printf("%s\n", (std::ostringstream() << opts).str().c_str());
      return 0;
    }
    po::notify(vm);
    check(fs::is_directory(input), "megacpp-prepare", "input directory ", input, " does not exist");
    check(val_fraction >= 0 && val_fraction < 1, "megacpp-prepare", "val_fraction must be in [0, 1), got ", val_fraction);

    const std::set<std::string> extensions{".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh"};
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied))
      if (e.is_regular_file() && extensions.count(e.path().extension().string())) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    check(!files.empty(), "megacpp-prepare", "no source files under ", input);

    fs::create_directories(output);
    data::ByteTokenizer tokenizer;
    Rng rng(seed);
    ShardSink train{output, "train", shard_tokens, {}, 0, 0}, val{output, "val", shard_tokens, {}, 0, 0};
    examples::ProgressBar bar("prepare", static_cast<double>(files.size()), "files");
    std::size_t n = 0;
    for (const auto& path : files) {
      std::ifstream in(path, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const std::string rel = fs::relative(path, input).generic_string();
      const bool is_val = static_cast<double>(fnv1a(rel) % 10000) < val_fraction * 10000;
      const auto doc = tokenizer.encode_document(text);
      if (is_val) val.add(doc);
      else train.add(data::fim_transform(doc, tokenizer.special(), data::FimConfig{fim_rate}, rng));
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
