// megacpp-train --sft and --gspo as processes: SFT from a pretrained checkpoint with its
// validation loss and an exact resume, GSPO rewarded by compiled tests with its policy updates
// logged, and every refusal the post-training flags promise (exit 2, the flag named).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "eval/rewards.hpp"
#include "run_checkpoint.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp;
using namespace megacpp::examples;
using megacpp::testing::Corpus;
using megacpp::testing::ProcessResult;
using RunsDir = megacpp::testing::TempDir;  // eval/ has a TempDir of its own
using megacpp::testing::kTrain;
using megacpp::testing::run;
using megacpp::testing::small_run;

namespace {
// 25 examples "int fN() {" -> "  return N;\n}\n" (every 20th is held out: 24 train, 1 validation).
void write_sft_file(const fs::path& file, int examples = 25) {
  std::ofstream out(file);
  for (int i = 0; i < examples; ++i)
    out << R"({"prompt": "// Returns )" << i << R"(.\nint f)" << i << R"(() {\n", "response": "  return )" << i
        << R"(;\n}\n"})" << "\n";
}

// A pretrained tiny model: 8 steps of small_run.
fs::path pretrain(const Corpus& corpus, const RunsDir& runs) {
  const auto r = run(kTrain, small_run(corpus.dir.path, runs / "base"), runs, "base.log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return runs / "base";
}

std::vector<std::string> sft_run(const Corpus& corpus, const fs::path& base, const fs::path& out, const fs::path& sft,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--init", base.string(), "--sft", sft.string(), "--seq_len", "64", "--steps", "6",
                                "--eval_every", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  return small_run(corpus.dir.path, out, args);
}

std::string metrics_of(const fs::path& run_dir) { return megacpp::testing::file_bytes(run_dir / "metrics.jsonl"); }
}  // namespace

TEST_CASE("sft: fine-tunes a pretrained checkpoint and resumes exactly", "[post_training]") {
  Corpus corpus;
  RunsDir runs;
  const fs::path base = pretrain(corpus, runs);
  write_sft_file(runs / "sft.jsonl");
  const auto straight = run(kTrain, sft_run(corpus, base, runs / "sft", runs / "sft.jsonl"), runs, "sft.log");
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  CHECK_THAT(straight.output, Catch::Contains("initialised from") && Catch::Contains("SFT: 24 training examples") &&
                                  Catch::Contains("validation on 1 held-out examples") && Catch::Contains("val loss"));
  const auto state = read_training_state(resolve_checkpoint(runs / "sft") / "state.json");
  CHECK(training_stage(state) == "sft");
  CHECK(state.post_training.contains("pretraining"));  // the FIM share's loader position
  CHECK(state.options.at("sft_fim_share") == 0.05);

  // 3 steps, then --resume for the other 3: the same weights, bit for bit.
  const auto first = run(kTrain, sft_run(corpus, base, runs / "split", runs / "sft.jsonl", {"--stop_at_step", "3"}),
                         runs, "a.log");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  auto resume_args = small_run(corpus.dir.path, runs / "split",
                               {"--resume", "--sft", (runs / "sft.jsonl").string(), "--seq_len", "64", "--steps", "6",
                                "--eval_every", "3"});
  const auto second = run(kTrain, resume_args, runs, "b.log");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(megacpp::testing::file_bytes(resolve_checkpoint(runs / "sft") / "model.safetensors") ==
        megacpp::testing::file_bytes(resolve_checkpoint(runs / "split") / "model.safetensors"));

  // Resuming the SFT run as pretraining, or on another SFT file, is refused.
  const auto as_pretraining = run(kTrain, small_run(corpus.dir.path, runs / "sft", {"--resume", "--steps", "9"}), runs, "c.log");
  CHECK(as_pretraining.exit_code != 0);
  CHECK_THAT(as_pretraining.output, Catch::Contains("is a run of sft"));
  write_sft_file(runs / "other.jsonl", 30);
  const auto other = run(kTrain, small_run(corpus.dir.path, runs / "sft",
                                           {"--resume", "--sft", (runs / "other.jsonl").string(), "--seq_len", "64",
                                            "--steps", "9"}),
                         runs, "d.log");
  CHECK(other.exit_code != 0);
  CHECK_THAT(other.output, Catch::Contains("another --sft file"));
}

TEST_CASE("sft: the flags it refuses", "[post_training]") {
  Corpus corpus;
  RunsDir runs;
  write_sft_file(runs / "sft.jsonl");
  const auto refused = [&](std::vector<std::string> extra, const std::string& message) {
    const auto r = run(kTrain, small_run(corpus.dir.path, runs / "refused", extra), runs, "refused.log");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(message));
  };
  const std::string sft = (runs / "sft.jsonl").string();
  refused({"--sft", sft}, "give --init CHECKPOINT");
  refused({"--sft", sft, "--init", "x", "--redo_every", "2"}, "ReDo, DASH and FIRE are off in post-training");
  refused({"--sft", sft, "--init", "x", "--fire", "now"}, "--fire");
  refused({"--gspo", "--init", "x", "--dash_every", "3"}, "--dash_every");
  refused({"--warmup_ratio", "0.1"}, "never a share of the run");
  refused({"--init", "x"}, "is for --sft or --gspo");
  refused({"--sft", sft, "--gspo", "--init", "x"}, "exclude each other");
  refused({"--sft", sft, "--init", "x", "--sft_fim_share", "1.5"}, "--sft_fim_share");
  refused({"--gspo", "--init", "x", "--gspo_group", "1"}, "--gspo_group");
  refused({"--gspo", "--init", "x", "--gspo_reward", "partial"}, "--gspo_reward");
  // A malformed example is named by file and line before any training.
  const fs::path base = pretrain(corpus, runs);
  {
    std::ofstream bad(runs / "bad.jsonl");
    bad << R"({"prompt": "p", "response": "r"})" << "\n" << R"({"prompt": "p"})" << "\n";
  }
  refused({"--init", base.string(), "--sft", (runs / "bad.jsonl").string()}, "bad.jsonl:2");
  // A prompt longer than a row leaves nothing to learn.
  {
    std::ofstream long_prompt(runs / "long.jsonl");
    long_prompt << R"({"prompt": ")" << std::string(100, 'x') << R"(", "response": "r"})" << "\n";
  }
  refused({"--init", base.string(), "--sft", (runs / "long.jsonl").string()}, "its prompt alone");
}

TEST_CASE("gspo: rewards from compiled tests drive clipped sequence-level updates", "[post_training]") {
  Corpus corpus;
  RunsDir runs;
  const fs::path base = pretrain(corpus, runs);
  // Problems whose reward depends on the completion: the test program exits with __LINE__ % 2,
  // so a completion passes when it has an odd number of newlines (the skipped #if 0 block
  // swallows whatever bytes it holds). Every group then has completions of both rewards.
  {
    std::ofstream problems(runs / "problems.jsonl");
    for (int i = 0; i < 2; ++i)
      problems << R"({"task_id": "parity/)" << i << R"(", "prompt": "#if 0\n", "test": "\n#endif\nint main() { return __LINE__ % 2; }\n"})"
               << "\n";
  }
  const auto args = small_run(corpus.dir.path, runs / "gspo",
                              {"--gspo", "--init", base.string(), "--eval_problems", (runs / "problems.jsonl").string(),
                               "--gspo_group", "4", "--gspo_prompts", "2", "--gspo_max_tokens", "24", "--steps", "3",
                               "--warmup_steps", "0", "--eval_pass_every", "3", "--eval_samples", "2",
                               "--eval_max_tokens", "24"});
  const auto r = run(kTrain, args, runs, "gspo.log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("GSPO on 2 problems") && Catch::Contains("step 3/3: reward") &&
                           Catch::Contains("pass@1"));
  const std::string metrics = metrics_of(runs / "gspo");
  CHECK_THAT(metrics, Catch::Contains("\"reward\"") && Catch::Contains("\"gspo_ratio\"") &&
                          Catch::Contains("\"gspo_clipped\"") && Catch::Contains("\"pass@1\""));
  CHECK(training_stage(read_training_state(resolve_checkpoint(runs / "gspo") / "state.json")) == "gspo");
  // GSPO continues with --resume; SFT's flags do not resume it.
  auto more = args;
  more.push_back("--resume");
  for (std::size_t i = 0; i < more.size(); ++i)
    if (more[i] == "--steps") more[i + 1] = "4";
  const auto it = std::find(more.begin(), more.end(), "--init");
  more.erase(it, it + 2);
  const auto resumed = run(kTrain, more, runs, "gspo2.log");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from") && Catch::Contains("step 4/4"));
}

TEST_CASE("gspo: the pass and CodeRL rewards of real candidates", "[post_training]") {
  // One problem, four candidates: a pass, a failed assert (SIGABRT: a failed test, not a crash),
  // a null dereference and a compile error.
  const Problem problem{"t/0", "#include <cstdlib>\n// Returns x + 1.\nint next(int x) {\n",
                        "#undef NDEBUG\n#include <cassert>\nint main() {\n  assert(next(1) == 2);\n}\n", "next", ""};
  const std::vector<Completion> candidates{
      {"t/0", "  return x + 1;\n}\n"},
      {"t/0", "  return x;\n}\n"},
      {"t/0", "  volatile int* p = nullptr;\n  return *p + x;\n}\n"},  // SIGSEGV: a runtime error
      {"t/0", "  return x +;\n}\n"}};
  HarnessOptions harness;
  harness.jobs = 2;
  const EvalReport report = evaluate_completions({problem}, candidates, harness);
  REQUIRE(report.results.size() == 4);
  const std::vector<double> pass{1, 0, 0, 0}, coderl{1, -0.3, -0.6, -1};
  for (std::size_t i = 0; i < 4; ++i) {
    INFO(i << ": " << report.results[i].status << " " << report.results[i].detail);
    CHECK(execution_reward(report.results[i], "pass") == pass[i]);
    CHECK(execution_reward(report.results[i], "coderl") == coderl[i]);
  }
  CHECK(report.results[3].compiled() == false);
  CHECK(report.results[2].compiled());
  CHECK(report.summary().at("compile_rate") == 0.75);
  CHECK_THROWS_WITH(execution_reward(report.results[0], "partial"), Catch::Contains("unknown reward"));
}
