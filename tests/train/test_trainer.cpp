// megacpp-train and megacpp-generate as processes: bit-exact resume, SIGKILL during checkpoint
// writes, phase switches, every bad input the issue lists, and cached generation == full forward.
// Runs use the tiny model on small shards written here (seq 32, global batch 128 tokens), so
// each process takes about a second.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <thread>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"
#include "megacpp/optim.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp;
using namespace megacpp::examples;
using megacpp::testing::Corpus;
using megacpp::testing::ProcessResult;
using megacpp::testing::TempDir;
using megacpp::testing::kGenerate;
using megacpp::testing::kTrain;
using megacpp::testing::run;
using megacpp::testing::small_run;


TEST_CASE("trainer: k steps, checkpoint, resume for N - k steps == N steps straight, bitwise", "[trainer]") {
  Corpus corpus;
  TempDir runs;
  const auto straight = run(kTrain, small_run(corpus.dir.path, runs / "straight"), runs, "straight.log");
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  CHECK_THAT(straight.output, Catch::Contains("val loss"));
  const auto first = run(kTrain, small_run(corpus.dir.path, runs / "split", {"--stop_at_step", "3"}), runs, "a.log");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Contains("stopped at step 3"));
  CHECK(resolve_checkpoint(runs / "split") == runs / "split" / "step_00000003");
  const auto second = run(kTrain, small_run(corpus.dir.path, runs / "split", {"--resume"}), runs, "b.log");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Contains("resumed from") && Catch::Contains("at step 3"));

  const fs::path a = resolve_checkpoint(runs / "straight"), b = resolve_checkpoint(runs / "split");
  REQUIRE(a.filename() == "step_00000008");
  REQUIRE(b.filename() == "step_00000008");
  CHECK(megacpp::testing::file_bytes(a / "model.safetensors") == megacpp::testing::file_bytes(b / "model.safetensors"));
  CHECK(megacpp::testing::file_bytes(a / "optimizer.safetensors") == megacpp::testing::file_bytes(b / "optimizer.safetensors"));
  const auto sa = read_training_state(a / "state.json"), sb = read_training_state(b / "state.json");
  CHECK(sa.train_position == sb.train_position);
  CHECK(sa.rng_state == sb.rng_state);
  CHECK(sa.tokens_seen == 8 * 128);
  // config.json (and the weights' metadata) describe the model as data; the weights say format pt.
  const auto config = nlohmann::json::parse(megacpp::testing::file_bytes(a / "config.json"));
  CHECK(config.at("pattern") == "AAM");
  CHECK(config.at("layers") == "AAM");
  CHECK(config.at("d_model") == 64);
  CHECK(config.at("vocab") == 264);
  CHECK(config.at("type_id") == TinyModel::type_id());
  const io::SafetensorsReader weights(a / "model.safetensors");
  CHECK(nlohmann::json::parse(weights.metadata().at("megacpp.config")) == config);
  CHECK(weights.metadata().at("format") == "pt");
  // state.json records the values the run used, not the command line's "model default" sentinels.
  CHECK(sa.options.at("steps") == 8);
  CHECK(sa.options.at("warmup_steps") == 2);
  CHECK(sa.options.at("eval_every") == 4);
  CHECK(sa.options.at("accumulation") == 2);  // 128 tokens = 2 micro-batches of 2 x 32

  // The run wrote its metrics and plot; the resumed log holds each step once.
  std::ifstream metrics(runs / "split" / "metrics.jsonl");
  std::string line;
  int train_lines = 0;
  while (std::getline(metrics, line)) train_lines += line.find("\"loss\"") != std::string::npos;
  CHECK(train_lines == 8);
  {  // every training line: each group's learning rate and the wall clock
    std::ifstream again(runs / "split" / "metrics.jsonl");
    std::getline(again, line);  // the step-0 evaluation
    CHECK(nlohmann::json::parse(line).contains("elapsed_s"));
    std::getline(again, line);
    const auto record = nlohmann::json::parse(line);
    CHECK(record.at("lr").is_object());
    CHECK(record.at("lr").size() >= 2);  // Muon's group and AdamW's (embedding, scalars)
    CHECK(record.at("time").get<double>() > 1.7e9);
    CHECK(record.at("learned_tokens").get<std::int64_t>() > 0);
  }
  CHECK(fs::exists(runs / "split" / "loss.svg"));

  SECTION("megacpp-generate: greedy decoding with caches == full forward per token") {
    const auto g = run(kGenerate, {"--checkpoint", (runs / "straight").string(), "--temperature", "0", "--tokens", "40",
                                   "--no_stop_at_eos", "--verify", "--prompt", "int "},
                       runs, "generate.log");
    CHECK(g.exit_code == 0);
    CHECK_THAT(g.output, Catch::Contains("cached decoding == full forward"));
  }
}

TEST_CASE("trainer: SIGKILL at random points never leaves a checkpoint that loads wrong", "[trainer]") {
  Corpus corpus;
  TempDir runs;
  const fs::path out = runs / "killed";
  Rng rng(2026);
  int loaded = 0;
  // The content of `latest` ("" while there is none).
  auto latest = [&] { return megacpp::testing::file_bytes(out / "latest"); };
  for (int attempt = 0; attempt < 6; ++attempt) {
    auto args = small_run(corpus.dir.path, out,
                          {"--steps", "100000", "--save_every", "1", "--eval_every", "100000", "--debug_checkpoint_pause_ms", "20"});
    if (fs::exists(out / "latest")) args.push_back("--resume");
    const std::string before = latest();
    megacpp::testing::Process p(kTrain, args, runs / ("kill" + std::to_string(attempt) + ".log"));
    // Wait (up to 2 minutes: CI machines are busy) until this process has published a checkpoint,
    // so it is in its save-every-step loop, then kill it at a random point of the next ~2 steps
    // (each save sleeps 20 ms between its files, so many kills land inside a write).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (latest() == before && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(rng.below(200)));
    p.kill();
    const ProcessResult r = p.wait();
    INFO("attempt " << attempt << " output:\n" << r.output);
    CHECK(r.signal == SIGKILL);
    if (!fs::exists(out / "latest")) continue;  // killed before the first checkpoint finished
    const fs::path dir = resolve_checkpoint(out);
    const TrainingState s = read_training_state(dir / "state.json");
    TinyModel model(0);
    optim::HybridOptions ho;
    optim::Hybrid<float, Cpu> opt(model, ho);
    REQUIRE_NOTHROW(load_checkpoint(dir, model, opt, TinyModel::type_id()));
    CHECK(s.step >= 1);
    ++loaded;
  }
  CHECK(loaded == 6);
  // And the run continues from whatever survived.
  const auto last = read_training_state(resolve_checkpoint(out) / "state.json");
  const auto r = run(kTrain, small_run(corpus.dir.path, out, {"--steps", std::to_string(last.step + 2), "--resume"}),
                     runs, "final.log");
  CHECK(r.exit_code == 0);
}

TEST_CASE("trainer: a phase switch from a checkpoint keeps the global batch and changes seq_len and rope_theta", "[trainer]") {
  Corpus corpus;
  TempDir runs;
  const std::vector<std::string> common{"--data", corpus.dir.path.string(), "--out", (runs / "phases").string(),
                                        "--total_batch_size", "2048", "--micro_batch", "2", "--steps", "4", "--eval_every", "2",
                                        "--val_tokens", "2048", "--sample_tokens", "0"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const auto p1 = run(kTrain, with({"--phase", "1", "--stop_at_step", "2"}), runs, "p1.log");
  INFO(p1.output);
  REQUIRE(p1.exit_code == 0);
  CHECK_THAT(p1.output, Catch::Contains("seq_len 256, rope_theta 10000") &&
                            Catch::Contains("global batch 2048 tokens = 4 micro-batches of 2 x 256"));
  const auto p2 = run(kTrain, with({"--phase", "2", "--resume"}), runs, "p2.log");
  INFO(p2.output);
  REQUIRE(p2.exit_code == 0);
  CHECK_THAT(p2.output, Catch::Contains("phase switch 1 -> 2") && Catch::Contains("seq_len 1024") &&
                            Catch::Contains("rope_theta 500000") &&
                            Catch::Contains("global batch 2048 tokens = 1 micro-batches of 2 x 1024"));
  CHECK(read_training_state(resolve_checkpoint(runs / "phases") / "state.json").phase == 2);
}

TEST_CASE("trainer: bad input stops with a clear message, never a crash", "[trainer]") {
  Corpus corpus;
  TempDir runs;
  auto expect_error = [&](const std::vector<std::string>& args, int code, const std::string& message) {
    const auto r = run(kTrain, args, runs, "bad.log");
    INFO(r.output);
    CHECK(r.signal == 0);
    CHECK(r.exit_code == code);
    CHECK_THAT(r.output, Catch::Contains(message));
  };
  auto data_dir = [&](const std::string& name, const std::string& train_bytes) {
    const fs::path d = runs / name;
    fs::create_directories(d);
    std::ofstream(d / "train_000000.bin", std::ios::binary) << train_bytes;
    fs::copy_file(corpus.dir / "val_000000.bin", d / "val_000000.bin");
    fs::copy_file(corpus.dir / data::kShardMetadataFile, d / data::kShardMetadataFile);
    return d;
  };
  const std::string good = megacpp::testing::file_bytes(corpus.dir / "train_000000.bin");

  SECTION("wrong magic") {
    std::string bad = good;
    bad[0] = 0x11;
    expect_error(small_run(data_dir("magic", bad), runs / "o"), 1, "bad magic");
  }
  SECTION("truncated shard (shorter than its header)") {
    expect_error(small_run(data_dir("short", good.substr(0, 100)), runs / "o"), 1, "file of 100");
  }
  SECTION("num_tokens larger than the file") {
    expect_error(small_run(data_dir("cut", good.substr(0, good.size() - 1000)), runs / "o"), 1, "header claims");
  }
  SECTION("token id >= vocab") {
    std::string bad = good;
    const std::size_t at = 1024 + 2 * 5;  // version 1: uint16 tokens after the 256-int32 header
    bad[at] = static_cast<char>(0x2C);    // 300 = 0x012C
    bad[at + 1] = 0x01;
    expect_error(small_run(data_dir("vocab", bad), runs / "o"), 1, "token id 300");
  }
  SECTION("empty data directory") {
    fs::create_directories(runs / "empty");
    expect_error(small_run(runs / "empty", runs / "o"), 1, "no train_*.bin shards");
  }
  SECTION("unknown command-line flag") {
    expect_error({"--no_such_flag", "3"}, 2, "no_such_flag");
  }
  SECTION("checkpoint from a different model type") {
    REQUIRE(run(kTrain, small_run(corpus.dir.path, runs / "tiny", {"--steps", "3"}), runs, "tiny.log").exit_code == 0);
    expect_error(small_run(corpus.dir.path, runs / "tiny", {"--model", "cmake100m", "--resume"}), 1,
                 "different model type");
  }
  SECTION("NaN loss stops with the step number") {
    expect_error(small_run(corpus.dir.path, runs / "nan", {"--debug_poison_step", "5"}), 3, "step 5: training loss is NaN");
  }
  SECTION("a global batch the micro-batch does not divide") {
    expect_error(small_run(corpus.dir.path, runs / "o", {"--total_batch_size", "100"}), 2, "not a multiple");
  }
}

TEST_CASE("trainer: a step with no learned target logs a null loss, and the plot skips it", "[trainer][metrics]") {
  // The training shard is BOS and then nothing but FIM sentinels (<PRE> <SUF> <MID> ...): with the
  // FIM mask (on by default) every target is masked, so no step has a loss or a gradient.
  Corpus corpus;
  TempDir runs;
  std::vector<std::uint32_t> context{256};  // BOS
  while (context.size() < 40000) context.push_back(static_cast<std::uint32_t>(258 + context.size() % 3));
  data::write_shard(corpus.dir / "train_000000.bin", context);
  const auto r = run(kTrain, small_run(corpus.dir.path, runs / "fim", {"--steps", "3"}), runs, "fim.log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("no learned target"));
  std::ifstream metrics(runs / "fim" / "metrics.jsonl");
  std::string line;
  int null_losses = 0;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) {
      CHECK(j.at("loss").is_null());
      CHECK(j.at("grad_norm").is_null());
      CHECK(j.at("learned_tokens") == 0);
      ++null_losses;
    }
  }
  CHECK(null_losses == 3);
  CHECK(fs::exists(runs / "fim" / "loss.svg"));
}

TEST_CASE("trainer: a --precision bf16 run resumes bitwise, keeps fp32 weights and records its precision", "[trainer][precision]") {
  Corpus corpus;
  TempDir runs;
  const std::vector<std::string> bf16{"--precision", "bf16"};
  const auto straight = run(kTrain, small_run(corpus.dir.path, runs / "straight", bf16), runs, "straight.log");
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  CHECK_THAT(straight.output, Catch::Contains("precision bf16"));
  auto first_args = bf16;
  first_args.insert(first_args.end(), {"--stop_at_step", "3"});
  REQUIRE(run(kTrain, small_run(corpus.dir.path, runs / "split", first_args), runs, "a.log").exit_code == 0);
  auto resume_args = bf16;
  resume_args.push_back("--resume");
  const auto second = run(kTrain, small_run(corpus.dir.path, runs / "split", resume_args), runs, "b.log");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, !Catch::Contains("written with --precision"));
  const fs::path a = resolve_checkpoint(runs / "straight"), b = resolve_checkpoint(runs / "split");
  REQUIRE(a.filename() == "step_00000008");
  CHECK(megacpp::testing::file_bytes(a / "model.safetensors") == megacpp::testing::file_bytes(b / "model.safetensors"));
  CHECK(megacpp::testing::file_bytes(a / "optimizer.safetensors") == megacpp::testing::file_bytes(b / "optimizer.safetensors"));
  CHECK(read_training_state(a / "state.json").options.at("precision") == "bf16");
  // the checkpoint holds the fp32 master weights: the same tensors, in F32, as an fp32 run's
  const auto fp32 = run(kTrain, small_run(corpus.dir.path, runs / "fp32", {"--precision", "fp32"}), runs, "fp32.log");
  INFO(fp32.output);
  REQUIRE(fp32.exit_code == 0);
  CHECK_THAT(fp32.output, Catch::Contains("precision fp32"));
  const fs::path c = resolve_checkpoint(runs / "fp32");
  CHECK(read_training_state(c / "state.json").options.at("precision") == "fp32");
  const io::SafetensorsReader w16(a / "model.safetensors"), w32(c / "model.safetensors");
  CHECK(w16.names() == w32.names());
  for (const auto& name : w16.names()) CHECK((w16.entry(name).dtype == "F32" && w32.entry(name).dtype == "F32"));
  CHECK(megacpp::testing::file_bytes(a / "model.safetensors") != megacpp::testing::file_bytes(c / "model.safetensors"));
  // resuming under the other precision works and says it is not the same run
  auto other = run(kTrain, small_run(corpus.dir.path, runs / "split", {"--precision", "fp32", "--resume", "--steps", "9"}),
                   runs, "c.log");
  INFO(other.output);
  CHECK(other.exit_code == 0);
  CHECK_THAT(other.output, Catch::Contains("written with --precision bf16, this run uses fp32"));
  // the default follows the CPU; a bad value is a usage error naming the flag
  const auto dflt = run(kTrain, small_run(corpus.dir.path, runs / "default", {"--steps", "3"}), runs, "d.log");
  CHECK_THAT(dflt.output, Catch::Contains(cpu::cpu_has_avx512_bf16() ? "precision bf16" : "precision fp32"));
  const auto bad = run(kTrain, small_run(corpus.dir.path, runs / "bad", {"--precision", "fp16"}), runs, "e.log");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("precision") && Catch::Contains("\"fp16\" is not one of bf16, fp32"));
}

TEST_CASE("trainer: tiny_mtp logs the MTP loss and lambda, steps lambda at --mtp_switch_tokens, resumes bitwise",
          "[trainer][mtp]") {
  Corpus corpus;
  TempDir runs;
  // 8 steps of 128 tokens: lambda 0.3 for the steps taken before 512 tokens were seen, then 0.1
  const std::vector<std::string> mtp{"--model", "tiny_mtp", "--mtp_switch_tokens", "512"};
  const auto straight = run(kTrain, small_run(corpus.dir.path, runs / "mtp", mtp), runs, "mtp.log");
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  CHECK_THAT(straight.output, Catch::Contains("mtp: ") && Catch::Contains("MTP depth 1"));
  std::ifstream metrics(runs / "mtp" / "metrics.jsonl");
  std::string line;
  std::vector<double> weights, mtp_losses;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    REQUIRE(j.contains("mtp_weight"));
    REQUIRE(j.contains("mtp_loss"));
    weights.push_back(j["mtp_weight"].get<double>());
    mtp_losses.push_back(j["mtp_loss"].get<double>());
  }
  CHECK(weights == std::vector<double>{0.3, 0.3, 0.3, 0.3, 0.1, 0.1, 0.1, 0.1});
  REQUIRE(mtp_losses.size() == 8);
  CHECK(mtp_losses.front() > 3.0);  // about log(264) at the start
  CHECK(mtp_losses.back() < mtp_losses.front());

  // the schedule is a function of tokens seen: a split run is the same run, bit for bit
  REQUIRE(run(kTrain, small_run(corpus.dir.path, runs / "split", [&] {
                auto a = mtp;
                a.insert(a.end(), {"--stop_at_step", "3"});
                return a;
              }()), runs, "a.log").exit_code == 0);
  auto resumed = mtp;
  resumed.push_back("--resume");
  REQUIRE(run(kTrain, small_run(corpus.dir.path, runs / "split", resumed), runs, "b.log").exit_code == 0);
  CHECK(megacpp::testing::file_bytes(resolve_checkpoint(runs / "mtp") / "model.safetensors") ==
        megacpp::testing::file_bytes(resolve_checkpoint(runs / "split") / "model.safetensors"));

  // lambda 0 throughout: no MTP compute, so no "mtp_loss"; a model without MTP refuses the flags
  const auto off = run(kTrain, small_run(corpus.dir.path, runs / "off", {"--model", "tiny_mtp", "--mtp_weight", "0",
                                                                        "--mtp_weight_final", "0", "--steps", "3"}),
                       runs, "off.log");
  REQUIRE(off.exit_code == 0);
  CHECK(megacpp::testing::file_bytes(runs / "off" / "metrics.jsonl").find("mtp_loss") == std::string::npos);
  const auto refused = run(kTrain, small_run(corpus.dir.path, runs / "o", {"--mtp_weight", "0.3"}), runs, "no.log");
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Catch::Contains("--mtp_weight") && Catch::Contains("has no MTP module"));
  const auto negative = run(kTrain, small_run(corpus.dir.path, runs / "o", {"--model", "tiny_mtp", "--mtp_weight=-0.5"}),
                            runs, "neg.log");
  CHECK(negative.exit_code == 2);
  CHECK_THAT(negative.output, Catch::Contains("--mtp_weight") && Catch::Contains("-0.5"));
}

TEST_CASE("trainer: tiny_moe and nam56r_tiny train by name and log the balance loss and the experts' load",
          "[trainer][moe]") {
  Corpus corpus;
  TempDir runs;
  for (const char* model : {"tiny_moe", "nam56r_tiny"}) {
    const auto r = run(kTrain, small_run(corpus.dir.path, runs / model, {"--model", model, "--steps", "3"}), runs,
                       "moe.log");
    INFO(model << ": " << r.output);
    REQUIRE(r.exit_code == 0);
    std::ifstream metrics(runs / model / "metrics.jsonl");
    std::string line;
    int steps = 0;
    while (std::getline(metrics, line)) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;
      ++steps;
      CHECK(j.at("moe_balance_loss").get<double>() > 0);
      const double lo = j.at("expert_load_min").get<double>(), hi = j.at("expert_load_max").get<double>();
      CHECK(lo >= 0);
      CHECK(lo <= 0.25);  // 4 experts: a share of 1/4 each when balanced
      CHECK(hi >= 0.25);
      CHECK(hi <= 1);
    }
    CHECK(steps == 3);
  }
}
