// megacpp-prepare: turns directories of source files into train/val token shards.
//
// Walks each --input DIR for C/C++/CUDA sources (sorted, so the output is deterministic), tokenizes each file
// as one document (byte-level: BOS + bytes + EOS; or, with --tokenizer, a byte-level BPE
// `tokenizer.json` such as StarCoder's: BOS + BPE tokens + EOS), applies fill-in-the-middle to a
// share of the training documents (docs/recipe.md: rate 0.5, a third of those structured; random only
// with --tokenizer, see below), and writes
// OUT/train_000000.bin ... and OUT/val_000000.bin in the modded-nanogpt shard format (uint16
// tokens, or uint32 in any shard holding an id above 65535: write_shard picks per shard). Files
// are assigned to val by a hash of their path, so adding a file never moves another between splits.
// OUT/shards.json records the tokenizer (its BOS, EOS and FIM ids, vocabulary size and a hash of
// tokenizer.json) so the trainer never guesses them (megacpp/data/shard_meta.hpp).
//
// Every flag is checked before any work. The shards are written into a hidden directory beside
// OUT, which replaces OUT only when everything is written: a failure leaves OUT as it was and no
// partial shard anywhere. An existing OUT is replaced only when it holds nothing but an earlier
// megacpp-prepare output, so a mistyped --output never deletes other files.
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

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "common/progress_bar.hpp"
#include "megacpp/data.hpp"
#include "megacpp/data/bpe_tokenizer.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace megacpp;
using namespace megacpp::examples;

namespace {
const std::string kTool = "megacpp-prepare";

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

// True for the files a megacpp-prepare output holds (and the build's stamp beside them).
bool is_prepare_output(const fs::path& file) {
  const std::string n = file.filename().string();
  const bool shard = (n.rfind("train_", 0) == 0 || n.rfind("val_", 0) == 0) && file.extension() == ".bin";
  return shard || n == data::kShardMetadataFile || n == "corpus.stamp";
}

// The hidden directory the shards are written into; removed unless commit() moved it into place.
class StagingDirectory {
 public:
  explicit StagingDirectory(const fs::path& out) : out_(out) {
    path_ = out.parent_path() / ("." + out.filename().string() + ".tmp." + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(path_, ec);
    ensure_writable_directory(kTool, "output", path_);
  }
  ~StagingDirectory() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  // Replaces OUT by the staging directory: OUT moves aside, the staging directory takes its name,
  // then the old OUT is removed. A crash in between leaves OUT or the complete new one in place.
  void commit() {
    const fs::path old = out_.parent_path() / ("." + out_.filename().string() + ".old." + std::to_string(::getpid()));
    const bool had_old = fs::exists(out_);
    if (had_old) fs::rename(out_, old);
    fs::rename(path_, out_);
    committed_ = true;
    std::error_code ec;
    if (had_old) fs::remove_all(old, ec);
  }

 private:
  fs::path out_, path_;
  bool committed_ = false;
};

int prepare(int argc, char** argv) {
  po::options_description opts("megacpp-prepare: source directory -> train/val token shards\nOptions");
  std::vector<std::string> inputs;
  std::string output;
  double val_fraction = 0.05, fim_rate = 0.5;
  std::string seed_text = "0";
  std::int64_t shard_tokens = 16 << 20;
  std::string tokenizer_path, special_names = kDefaultSpecialTokens;
  opts.add_options()("help,h", "show this help and exit")("version", "print the version and exit")
      ("input,i", po::value(&inputs)->required()->composing(),
       "directory to walk for .h .hpp .c .cc .cpp .cu .cuh files (repeat for several)")
      ("output,o", po::value(&output)->required(),
       "directory for train_*.bin, val_*.bin and shards.json (replaced only if it holds an earlier output)")
      ("val_fraction", po::value(&val_fraction)->default_value(val_fraction, shown_default(val_fraction)), "share of files (by path hash) kept for validation, in [0, 1)")
      ("fim_rate", po::value(&fim_rate)->default_value(fim_rate, shown_default(fim_rate)), "probability a training file becomes a FIM example, in [0, 1]")
      ("shard_tokens", po::value(&shard_tokens)->default_value(shard_tokens), "tokens per shard (the last may be smaller), in [1, 2^31 - 1]")
      ("seed", po::value(&seed_text)->default_value(seed_text), "seed of the FIM transform (unsigned 64-bit)")
      ("tokenizer", po::value(&tokenizer_path), "byte-level BPE tokenizer.json (default: the byte tokenizer, vocab 261)")
      ("special_tokens", po::value(&special_names)->default_value(special_names),
       "with --tokenizer: the added tokens used as BOS,EOS,FIM prefix,FIM suffix,FIM middle");
  po::variables_map vm;
  if (!parse_flags_or_help(argc, argv, opts, opts, vm)) return kExitOk;  // --help

  // Every flag before any work.
  const std::uint64_t seed = parse_u64_flag(kTool, "seed", seed_text);
  check_real(kTool, "val_fraction", val_fraction, 0, 1);
  check_flag(val_fraction < 1, kTool, "val_fraction", "must be below 1 (the training split needs files), got ", val_fraction);
  check_real(kTool, "fim_rate", fim_rate, 0, 1);
  check_range(kTool, "shard_tokens", shard_tokens, 1, INT32_MAX, "a shard header counts tokens in an int32");
  check_flag(!output.empty(), kTool, "output", "is empty");
  const fs::path out = fs::absolute(output).lexically_normal();
  check_flag(!out.filename().empty() && out.has_parent_path() && out != out.root_path(), kTool, "output", "\"",
             output, "\" names no directory that can be replaced");
  for (const auto& input : inputs)
    check(fs::is_directory(input), kTool, "--input ", input, fs::exists(input) ? " is not a directory" : " does not exist");
  if (fs::exists(out)) {
    check(fs::is_directory(out), kTool, "--output ", output, " exists and is not a directory");
    for (const auto& e : fs::directory_iterator(out))
      check(e.is_regular_file() && is_prepare_output(e.path()), kTool, "--output ", output, " holds ",
            e.path().filename().string(), ", which megacpp-prepare did not write: refusing to replace it (choose "
            "an empty or new directory)");
  }
  const data::BpeSpecialNames names = parse_special_token_names(kTool, special_names);
  const std::string tokenizer_bytes =
      tokenizer_path.empty() ? std::string() : read_flag_file(kTool, "--tokenizer", tokenizer_path);

  // The BPE option: special tokens by name; structured FIM is off because its docstring finder
  // (fim.hpp leading_comment_end) reads byte ids, which BPE ids are not. Random FIM is unchanged.
  data::ByteTokenizer byte_tokenizer;
  std::optional<data::BpeTokenizer> bpe;
  data::FimConfig fim{fim_rate};
  data::ShardMetadata meta = data::byte_shard_metadata();
  if (!tokenizer_path.empty()) {
    bpe = data::BpeTokenizer::from_json(tokenizer_bytes, names, tokenizer_path);
    fim.structured_share = 0.0;
    meta.tokenizer = "bpe";
    meta.tokenizer_hash = data::tokenizer_fingerprint(tokenizer_bytes);
    meta.vocab_size = bpe->vocab_size();
    meta.special = bpe->special();
    std::printf("megacpp-prepare: BPE tokenizer %s: vocab %d, %zu merges, %zu added tokens; structured FIM off\n",
                tokenizer_path.c_str(), bpe->vocab_size(), bpe->num_merges(), bpe->num_added_tokens());
  }
  data::validate(meta, tokenizer_path.empty() ? std::string("the byte tokenizer") : tokenizer_path);
  const data::SpecialTokens special = meta.special;

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
  check(!files.empty(), kTool, "no source files under ", inputs.front(), inputs.size() > 1 ? " and the other inputs" : "");

  StagingDirectory staging(out);
  Rng rng(seed);
  const auto per_shard = static_cast<std::size_t>(shard_tokens);
  ShardSink train{staging.path(), "train", per_shard, {}, 0, 0}, val{staging.path(), "val", per_shard, {}, 0, 0};
  ProgressBar bar("prepare", static_cast<double>(files.size()), "files");
  std::size_t n = 0;
  for (const auto& [path, rel] : files) {
    const std::string text = read_flag_file(kTool, "input file", path);
    const bool is_val = static_cast<double>(data::fnv1a64(rel) % 10000) < val_fraction * 10000;
    const auto doc = bpe ? bpe->encode_document(text) : byte_tokenizer.encode_document(text);
    if (is_val) val.add(doc);
    else train.add(data::fim_transform(doc, special, fim, rng));
    bar.update(static_cast<double>(++n));
  }
  bar.finish();
  train.flush();
  val.flush();
  check(train.written > 0 && val.written > 0, kTool, "split left ", train.written ? "val" : "train",
        " empty: use more files or another --val_fraction (nothing was written to ", output, ")");
  data::write_shard_metadata(staging.path(), meta);
  staging.commit();
  std::printf("megacpp-prepare: %zu files -> %zu train tokens in %d shard(s), %zu val tokens in %d shard(s) under %s "
              "(%s tokenizer, BOS %d)\n",
              files.size(), train.total, train.written, val.total, val.written, output.c_str(), meta.tokenizer.c_str(),
              meta.special.bos);
  return kExitOk;
}
}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return prepare(argc, argv); });
}
