// The tools under hostile input (issue: "bad input never aborts and never poisons a run"), each
// run as a process: the exit code, the one-line message naming the flag or file, and what is left
// on disk. Exit codes are those of docs/trainer.md: 1 a bad file or directory, 2 a bad command
// line, 3 a diverged run. Every run here stops at startup or after a few tiny steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/data.hpp"
#include "megacpp/optim.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp;
using namespace megacpp::examples;
using megacpp::testing::Corpus;
using megacpp::testing::file_bytes;
using megacpp::testing::kGenerate;
using megacpp::testing::kPrepare;
using megacpp::testing::kTrain;
using megacpp::testing::ProcessResult;
using megacpp::testing::run;
using megacpp::testing::small_run;
using megacpp::testing::TempDir;

namespace {
// Runs `exe` and checks it ended by exit (never a signal) with `code` and `message` in its output.
ProcessResult expect_exit(const std::string& exe, const std::vector<std::string>& args, const TempDir& dir, int code,
                          const std::string& message) {
  const ProcessResult r = run(exe, args, dir, "tool.log");
  INFO(exe << " output:\n" << r.output);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == code);
  CHECK_THAT(r.output, Catch::Contains(message));
  return r;
}

// A few C++ files for megacpp-prepare: `n` files of a few lines each.
void write_sources(const fs::path& dir, int n) {
  fs::create_directories(dir);
  for (int i = 0; i < n; ++i)
    std::ofstream(dir / ("file" + std::to_string(i) + ".cpp")) << "int value" << i << " = " << i << ";\n";
}

// Every parameter of the checkpoint in `dir` is finite (it loads into the tiny model).
bool checkpoint_is_finite(const fs::path& dir) {
  TinyModel model(0);
  optim::Hybrid<float, Cpu> opt(model);
  load_checkpoint(dir, model, opt, TinyModel::type_id());
  for (const auto& p : optim::collect_params<float, Cpu>(model))
    for (const float v : p.var.value().to_host())
      if (!std::isfinite(v)) return false;
  return true;
}

std::string read_text(const fs::path& p) { return file_bytes(p); }
}  // namespace

TEST_CASE("tools: any exception is one line naming the tool and the file, never an abort", "[tools][hostile]") {
  TempDir dir;
  write_sources(dir / "src", 4);
  std::ofstream(dir / "README.md") << "a file, not a directory\n";
  SECTION("megacpp-prepare --output names an existing file (was an uncaught filesystem_error)") {
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", (dir / "README.md").string()}, dir, 1,
                "megacpp-prepare: --output " + (dir / "README.md").string() + " exists and is not a directory");
    CHECK(read_text(dir / "README.md") == "a file, not a directory\n");
  }
  SECTION("megacpp-prepare --tokenizer names a directory (was an uncaught ios_failure)") {
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", (dir / "out").string(), "--tokenizer",
                           (dir / "src").string()},
                dir, 1, "megacpp-prepare: --tokenizer " + (dir / "src").string() + " is not a regular file");
    CHECK(!fs::exists(dir / "out"));
  }
  SECTION("megacpp-generate: --tokens beyond the context, and a state.json that is a directory") {
    Corpus corpus;
    const fs::path out = dir / "run";
    REQUIRE(run(kTrain, small_run(corpus.dir.path, out, {"--steps", "3"}), dir, "train.log").exit_code == 0);
    const ProcessResult r = expect_exit(kGenerate, {"--checkpoint", out.string(), "--tokens", "1000000000000"}, dir, 2,
                                        "megacpp-generate: --tokens 1000000000000 + the prompt's 11 tokens exceed the "
                                        "context of \"tiny\" (max_seq 4096)");
    CHECK(r.output.find('\n') == r.output.size() - 1);  // one line
    expect_exit(kGenerate, {"--checkpoint", out.string(), "--device", "tpu"}, dir, 2,
                "megacpp-generate: --device \"tpu\" is not one of cpu, cuda");
#ifndef MEGACPP_TRAIN_HAS_CUDA  // with its CUDA unit, tests/train/cuda_train.sh runs --device cuda on a GPU
    expect_exit(kGenerate, {"--checkpoint", out.string(), "--device", "cuda"}, dir, 2,
                "megacpp-generate: --device cuda: this megacpp-generate was built without the CUDA backend");
#endif
    const fs::path step = resolve_checkpoint(out);
    fs::remove(step / "state.json");
    fs::create_directories(step / "state.json");
    expect_exit(kGenerate, {"--checkpoint", step.string()}, dir, 1,
                "megacpp-generate: checkpoint: " + (step / "state.json").string() + " is not a regular file");
    expect_exit(kTrain, small_run(corpus.dir.path, out, {"--steps", "4", "--resume", step.string()}), dir, 1,
                "megacpp-train: checkpoint: " + (step / "state.json").string() + " is not a regular file");
  }
}

TEST_CASE("megacpp-train: every flag is checked before any work, as an integer, in range", "[tools][hostile]") {
  Corpus corpus;
  TempDir dir;
  const fs::path out = dir / "o";
  // Exit 2 naming the flag, before the model is built: no evaluation ran and --out stays unwritten.
  auto refused = [&](std::vector<std::string> extra, const std::string& message) {
    const ProcessResult r = expect_exit(kTrain, small_run(corpus.dir.path, out, std::move(extra)), dir, 2, message);
    CHECK_THAT(r.output, !Catch::Contains("val loss"));
    CHECK(!fs::exists(out / "metrics.jsonl"));
  };
  refused({"--seed", "-1"}, "--seed must be an unsigned integer, got \"-1\"");
  refused({"--seed", "18446744073709551616"}, "--seed \"18446744073709551616\" is out of range");
  refused({"--steps", "0"}, "--steps must be in [1, ");
  refused({"--steps", "-1"}, "--steps must be in [1, ");
  refused({"--steps", "ten"}, "the argument ('ten') for option '--steps' is invalid");
  refused({"--micro_batch", "0"}, "--micro_batch must be in [1, ");
  refused({"--save_every", "-1"}, "--save_every must be in [0, ");
  refused({"--eval_every", "-1"}, "--eval_every must be in [1, ");
  refused({"--micro_batch", "4611686018427387904", "--seq_len", "4"}, "--micro_batch must be in [1, ");
  refused({"--micro_batch", "4", "--seq_len", "64"}, "exceeds the global batch of 128 tokens");
  refused({"--total_batch_size", "8589934592"}, "micro-batches of 64 tokens per step, more than 65536");
  refused({"--max_grad_norm", "0"}, "--max_grad_norm must be finite and > 0, got 0");
  refused({"--lr_matrix", "nan"}, "--lr_matrix must be finite");
  refused({"--temperature", "-1"}, "--temperature must be finite and in [0, ");
  refused({"--top_k", "-1"}, "--top_k must be in [0, ");
  refused({"--top_k", "1000"}, "--top_k 1000 exceeds the model's vocabulary of 264");
  refused({"--sample_tokens", "5000"}, "--sample_tokens 5000 + the prompt's 11 tokens exceed the model's context of 4096");
  refused({"--phase", "9"}, "--phase must be in [1, 3]");
  refused({"--stop_at_step", "9"}, "--stop_at_step 9 is past the run's last step 8");
  refused({"--warmup_steps", "8"}, "wsd needs total_steps > warmup_steps");
  refused({"--model", "huge"}, "--model \"huge\" is not a model");
  refused({"--device", "tpu"}, "--device \"tpu\" is not one of cpu, cuda");
  refused({"--device", "cuda", "--gspo", "--init", out.string()}, "--device cuda with --gspo: GSPO's rollouts run on the CPU");
#ifndef MEGACPP_TRAIN_HAS_CUDA  // with its CUDA units, tests/train/cuda_train.sh checks the GPU-less refusal
  refused({"--device", "cuda"}, "--device cuda: this megacpp-train was built without the CUDA backend");
#endif

  SECTION("an --out that cannot be written is found at startup (exit 1), not at the first checkpoint") {
    std::ofstream(dir / "file") << "x";
    const ProcessResult r = expect_exit(kTrain, small_run(corpus.dir.path, dir / "file" / "run"), dir, 1,
                                        "megacpp-train: --out " + (dir / "file" / "run").string() +
                                            ": cannot create the directory");
    CHECK_THAT(r.output, !Catch::Contains("val loss"));
  }
}

TEST_CASE("megacpp-train: a diverged step stops with exit 3 before it is checkpointed", "[tools][hostile]") {
  Corpus corpus;
  TempDir dir;
  SECTION("an embedding learning rate of 1e38 makes the weights infinite: latest stays the last finite checkpoint") {
    const fs::path out = dir / "nan";
    REQUIRE(run(kTrain, small_run(corpus.dir.path, out, {"--stop_at_step", "3"}), dir, "first.log").exit_code == 0);
    const ProcessResult r = expect_exit(
        kTrain, small_run(corpus.dir.path, out, {"--resume", "--save_every", "1", "--lr_embedding", "1e38", "--warmup_steps", "0"}),
        dir, 3, "'embedding.weight'");
    // The step that went bad was not saved: latest names the newest checkpoint, and it is finite.
    const auto kept = list_checkpoints(out);
    REQUIRE(!kept.empty());
    CHECK(resolve_checkpoint(out) == kept.back().second);
    CHECK_THAT(r.output, Catch::Contains("stopped before this state was checkpointed. Last checkpoint: " +
                                         kept.back().second.string()));
    const std::int64_t bad_step = kept.back().first + 1;
    CHECK_THAT(r.output, Catch::Contains("megacpp-train: step " + std::to_string(bad_step) + ": "));
    for (const auto& [step, path] : kept) {
      INFO(path);
      CHECK(checkpoint_is_finite(path));
    }
    CHECK_THAT(read_text(out / "metrics.jsonl"),
               Catch::Contains("{\"diverged\":") && Catch::Contains("\"step\":" + std::to_string(bad_step) + "}"));
  }
  SECTION("an overflow clipping would have thrown on (lr 1e20) ends with exit 3, naming the gradients") {
    const ProcessResult r = expect_exit(
        kTrain, small_run(corpus.dir.path, dir / "big", {"--lr_embedding", "1e20", "--warmup_steps", "0"}), dir, 3,
        "gradient norm is");
    CHECK_THAT(r.output, Catch::Contains("megacpp-train: step ") && Catch::Contains("non-finite gradients in 'embedding.weight'") &&
                             Catch::Contains("the optimizer step was not taken"));
  }
  SECTION("a loss stuck exactly constant with finite weights is reported in the log and the metrics") {
    const fs::path out = dir / "flat";
    const ProcessResult r = expect_exit(
        kTrain, small_run(corpus.dir.path, out, {"--lr_matrix", "1e30", "--warmup_steps", "0", "--plateau_steps", "3"}),
        dir, 0, "warning: step ");
    CHECK_THAT(r.output, Catch::Contains("the training loss has been exactly") && Catch::Contains("for 3 steps"));
    CHECK_THAT(read_text(out / "metrics.jsonl"), Catch::Contains("\"constant_loss_steps\":3"));
  }
}

TEST_CASE("megacpp-train: resuming into an --out that holds later steps is refused, a fresh run moves an old one aside",
          "[tools][hostile]") {
  Corpus corpus;
  TempDir dir;
  const fs::path out = dir / "r";
  REQUIRE(run(kTrain, small_run(corpus.dir.path, out, {"--steps", "6", "--save_every", "2", "--keep_checkpoints", "3"}),
              dir, "first.log")
              .exit_code == 0);
  const std::string step6 = file_bytes(out / "step_00000006" / "model.safetensors");
  const std::string metrics = file_bytes(out / "metrics.jsonl");
  REQUIRE(fs::exists(out / "step_00000004"));
  const ProcessResult r = expect_exit(
      kTrain, small_run(corpus.dir.path, out, {"--steps", "6", "--resume", (out / "step_00000004").string(), "--lr_matrix", "0.001"}),
      dir, 1, "holds checkpoints after the resume point (step 4): step_00000006");
  CHECK_THAT(r.output, Catch::Contains("Resume into another --out"));
  CHECK(file_bytes(out / "step_00000006" / "model.safetensors") == step6);
  CHECK(file_bytes(out / "metrics.jsonl") == metrics);
  CHECK(resolve_checkpoint(out) == out / "step_00000006");

  // The fix the message names: another --out, reading the checkpoint where it is.
  REQUIRE(run(kTrain, small_run(corpus.dir.path, dir / "r2", {"--steps", "6", "--resume", (out / "step_00000004").string()}),
              dir, "second.log")
              .exit_code == 0);
  // A fresh run into a used --out keeps the old run whole, aside.
  const ProcessResult fresh = run(kTrain, small_run(corpus.dir.path, out, {"--steps", "3"}), dir, "fresh.log");
  INFO(fresh.output);
  REQUIRE(fresh.exit_code == 0);
  CHECK_THAT(fresh.output, Catch::Contains("held an earlier run: moved"));
  CHECK(resolve_checkpoint(out) == out / "step_00000003");
  CHECK(!fs::exists(out / "step_00000006"));
  int aside = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().rfind("replaced_", 0) == 0) {
      ++aside;
      CHECK(file_bytes(e.path() / "step_00000006" / "model.safetensors") == step6);
      CHECK(file_bytes(e.path() / "metrics.jsonl") == metrics);
    }
  CHECK(aside == 1);
}

TEST_CASE("megacpp-prepare: output appears whole or not at all", "[tools][hostile]") {
  TempDir dir;
  write_sources(dir / "src", 3);
  const fs::path out = dir / "shards";
  SECTION("a failed split leaves no directory and no partial shard") {
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", out.string(), "--val_fraction", "0"}, dir, 1,
                "split left val empty");
    CHECK(!fs::exists(out));
    for (const auto& e : fs::directory_iterator(dir.path)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
  SECTION("a failure keeps an earlier output as it was; a success replaces it, with shards.json") {
    write_sources(dir / "many", 40);
    REQUIRE(run(kPrepare, {"--input", (dir / "many").string(), "--output", out.string(), "--val_fraction", "0.3"}, dir,
                "ok.log")
                .exit_code == 0);
    const std::string train = file_bytes(out / "train_000000.bin");
    const data::ShardMetadata meta = data::read_shard_metadata(out);
    CHECK(meta == data::byte_shard_metadata());
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", out.string(), "--val_fraction", "0"}, dir, 1,
                "split left val empty");
    CHECK(file_bytes(out / "train_000000.bin") == train);
    std::ofstream(out / "notes.txt") << "mine";
    expect_exit(kPrepare, {"--input", (dir / "many").string(), "--output", out.string()}, dir, 1,
                "holds notes.txt, which megacpp-prepare did not write");
    CHECK(fs::exists(out / "notes.txt"));
  }
  SECTION("bad flags are exit 2") {
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", out.string(), "--shard_tokens", "-1"}, dir, 2,
                "--shard_tokens must be in [1, 2147483647]");
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", out.string(), "--seed", "-1"}, dir, 2,
                "--seed must be an unsigned integer");
    expect_exit(kPrepare, {"--input", (dir / "src").string(), "--output", out.string(), "--fim_rate", "2"}, dir, 2,
                "--fim_rate must be finite and in [0, 1]");
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("checkpoint state.json: every field is range-checked and named on load", "[tools][hostile]") {
  Corpus corpus;
  TempDir dir;
  const fs::path out = dir / "run";
  REQUIRE(run(kTrain, small_run(corpus.dir.path, out, {"--steps", "3"}), dir, "train.log").exit_code == 0);
  const fs::path state_file = resolve_checkpoint(out) / "state.json";
  const nlohmann::json good = nlohmann::json::parse(file_bytes(state_file));
  auto with = [&](const std::string& text, const std::string& message) {
    std::ofstream(state_file, std::ios::trunc) << text;
    expect_exit(kGenerate, {"--checkpoint", out.string(), "--tokens", "4"}, dir, 1, message);
  };
  auto edited = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = good;
    j[key] = value;
    return j.dump();
  };
  with(edited("rng_state", "-1"), "rng_state \"-1\" is not an unsigned 64-bit integer");
  with(edited("phase", 9), "field \"phase\" = 9 is outside [1, 3]");
  with(edited("threads", 1e300), "field \"threads\" = 1e+300 is not an integer");
  with(edited("threads", 0), "field \"threads\" = 0 is outside [1, ");
  with(edited("step", -5), "field \"step\" = -5 is outside [0, ");
  with(std::string(100000, '[') + std::string(100000, ']'), "nesting deeper than the limit of 512");
  std::ofstream(state_file, std::ios::trunc) << good.dump();
  const ProcessResult ok = run(kGenerate, {"--checkpoint", out.string(), "--tokens", "4"}, dir, "ok.log");
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("megacpp-train: special token ids come from the shards' shards.json", "[tools][hostile]") {
  Corpus corpus;
  TempDir dir;
  auto shards_with = [&](const std::string& name, const std::string* meta_json) {
    const fs::path d = dir / name;
    fs::create_directories(d);
    fs::copy_file(corpus.dir / "train_000000.bin", d / "train_000000.bin");
    fs::copy_file(corpus.dir / "val_000000.bin", d / "val_000000.bin");
    if (meta_json) std::ofstream(d / data::kShardMetadataFile) << *meta_json;
    return d;
  };
  SECTION("shards without metadata are refused") {
    expect_exit(kTrain, small_run(shards_with("bare", nullptr), dir / "o"), dir, 1, "no shards.json in");
  }
  SECTION("a vocabulary larger than the model's is refused") {
    const std::string m = R"({"format": 1, "tokenizer": "bpe", "tokenizer_hash": "fnv1a64:0000000000000001",
      "vocab_size": 49152, "bos": 0, "eos": 0, "fim_prefix": 1, "fim_suffix": 2, "fim_middle": 3})";
    expect_exit(kTrain, small_run(shards_with("big", &m), dir / "o"), dir, 1,
                "tokenizer has 49152 token ids but the model's vocabulary is 264");
  }
  SECTION("metadata that contradicts itself is refused, naming the field") {
    const std::string m = R"({"format": 1, "tokenizer": "bpe", "tokenizer_hash": "x", "vocab_size": 200,
      "bos": 256, "eos": 0, "fim_prefix": 1, "fim_suffix": 2, "fim_middle": 3})";
    expect_exit(kTrain, small_run(shards_with("odd", &m), dir / "o"), dir, 1, "bos id 256 is outside the vocabulary [0, 200)");
  }
  SECTION("BPE shards: BOS is the metadata's id, and a resume on other shards is refused") {
    const std::string m = R"({"format": 1, "tokenizer": "bpe", "tokenizer_hash": "fnv1a64:00000000000000aa",
      "vocab_size": 261, "bos": 10, "eos": 10, "fim_prefix": 258, "fim_suffix": 259, "fim_middle": 260})";
    const fs::path bpe = shards_with("bpe", &m);
    const ProcessResult r = expect_exit(kTrain, small_run(bpe, dir / "b", {"--steps", "3", "--sample_tokens", "20"}),
                                        dir, 0, "bpe tokenizer, BOS 10");
    CHECK_THAT(r.output, Catch::Contains("no sample: the shards' bpe tokenizer"));
    CHECK(read_training_state(resolve_checkpoint(dir / "b") / "state.json").shards.special.bos == 10);
    expect_exit(kTrain, small_run(corpus.dir.path, dir / "b", {"--steps", "4", "--resume"}), dir, 1,
                "resume on shards written with the same tokenizer");
  }
}

TEST_CASE("CLI conventions: --version, short flags, switches, defaults as written", "[tools]") {
  TempDir dir;
  for (const std::string& tool : {kTrain, kGenerate, kPrepare}) {
    const ProcessResult v = run(tool, {"--version"}, dir, "version.log");
    INFO(tool << ": " << v.output);
    CHECK(v.exit_code == 0);
    CHECK_THAT(v.output, Catch::Contains(std::string(" ") + megacpp::kVersion));
  }
  const ProcessResult help = run(kTrain, {"--help"}, dir, "help.log");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("-m [ --model ]") && Catch::Contains("--no_fim_mask") &&
                              Catch::Contains("(=0.004)"));
  CHECK_THAT(help.output, !Catch::Contains("00000000000"));  // no 17-digit defaults
  CHECK_THAT(help.output, Catch::Contains("--mix arg (=phase mixture)") && Catch::Contains("code=0.7,text=0.2,math=0.1"));
  const ProcessResult prepare_help = run(kPrepare, {"--help"}, dir, "prepare_help.log");
  CHECK(prepare_help.exit_code == 0);
  CHECK_THAT(prepare_help.output, Catch::Contains("--stream arg") && Catch::Contains("--fim_rate arg (=0.6)") &&
                                      Catch::Contains("--fim_structured arg (=1/3)"));
  // A boolean takes no value; a usage error exits 2 naming the flag.
  expect_exit(kTrain, {"--no_fim_mask", "1"}, dir, 2, "too many positional options");
  expect_exit(kGenerate, {"-c", (dir / "none").string(), "-n", "-5"}, dir, 2, "--tokens");
}
