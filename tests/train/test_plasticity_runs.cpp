// megacpp-train's plasticity interventions end to end: DASH and ReDo in phase 1 logged and resumed
// bitwise, FIRE at the entry of phase 2 once (a resume inside the phase does not repeat it), and
// the flag rules (exit 2 with the flag named).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/temp_dir.hpp"
#include "run_checkpoint.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp;
using namespace megacpp::examples;
using megacpp::testing::Corpus;
using megacpp::testing::TempDir;
using megacpp::testing::kTrain;
using megacpp::testing::run;
using megacpp::testing::small_run;

namespace {
// The metrics records of `run_dir` with "intervention" == what.
std::vector<nlohmann::json> interventions(const fs::path& run_dir, const std::string& what) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("intervention", "") == what) out.push_back(j);
  }
  return out;
}
}  // namespace

TEST_CASE("trainer plasticity: DASH and ReDo in phase 1 are logged, and a resumed run equals a straight one bitwise",
          "[trainer][plasticity]") {
  Corpus corpus;
  TempDir runs;
  const std::vector<std::string> flags{"--dash_every", "2", "--redo_every", "4", "--redo_tau", "0.5"};
  auto with = [&](const fs::path& out, std::vector<std::string> extra) {
    extra.insert(extra.end(), flags.begin(), flags.end());
    return small_run(corpus.dir.path, out, extra);
  };
  const auto straight = run(kTrain, with(runs / "straight", {}), runs, "straight.log");
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  const auto dash = interventions(runs / "straight", "dash"), redo = interventions(runs / "straight", "redo");
  REQUIRE(dash.size() == 4);  // steps 2, 4, 6, 8
  CHECK(dash[0]["step"] == 2);
  REQUIRE(redo.size() == 2);  // steps 4, 8
  CHECK(redo[0]["units"].get<int>() > 0);  // tau 0.5 recycles some units of the tiny model
  const auto first = run(kTrain, with(runs / "split", {"--stop_at_step", "5"}), runs, "a.log");
  REQUIRE(first.exit_code == 0);
  const auto second = run(kTrain, with(runs / "split", {"--resume"}), runs, "b.log");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  const fs::path a = resolve_checkpoint(runs / "straight"), b = resolve_checkpoint(runs / "split");
  // ReDo's statistics at step 5 are in the checkpoint, so the step-8 recycle sees the same evidence
  CHECK(megacpp::testing::file_bytes(a / "model.safetensors") == megacpp::testing::file_bytes(b / "model.safetensors"));
  CHECK(megacpp::testing::file_bytes(a / "optimizer.safetensors") == megacpp::testing::file_bytes(b / "optimizer.safetensors"));
  CHECK(interventions(runs / "split", "redo").size() == 2);
}

TEST_CASE("trainer plasticity: entering phase 2 runs FIRE on Q/K once and records it", "[trainer][plasticity]") {
  Corpus corpus;
  TempDir runs;
  const std::vector<std::string> common{"--data", corpus.dir.path.string(), "--out", (runs / "phases").string(),
                                        "--total_batch_size", "2048", "--micro_batch", "2", "--steps", "6", "--eval_every", "2",
                                        "--val_tokens", "2048", "--sample_tokens", "0"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  REQUIRE(run(kTrain, with({"--phase", "1", "--stop_at_step", "2"}), runs, "p1.log").exit_code == 0);
  CHECK(interventions(runs / "phases", "fire").empty());
  const auto p2 = run(kTrain, with({"--phase", "2", "--resume", "--stop_at_step", "4"}), runs, "p2.log");
  INFO(p2.output);
  REQUIRE(p2.exit_code == 0);
  const auto fire = interventions(runs / "phases", "fire");
  REQUIRE(fire.size() == 1);
  CHECK(fire[0]["step"] == 2);
  CHECK(fire[0]["phase"] == 2);
  CHECK(fire[0]["params"].size() == 4);  // wq and wk of the two attention layers
  const auto state = read_training_state(resolve_checkpoint(runs / "phases") / "state.json");
  CHECK(state.plasticity["fire"]["blocks.0.mixer.wq.weight"] == 2);
  // a resume inside phase 2 does not repeat it; --fire now in the same phase is refused
  const auto again = run(kTrain, with({"--phase", "2", "--resume", "--stop_at_step", "5"}), runs, "p2b.log");
  REQUIRE(again.exit_code == 0);
  CHECK(interventions(runs / "phases", "fire").size() == 1);
  const auto now = run(kTrain, with({"--phase", "2", "--resume", "--fire", "now"}), runs, "p2c.log");
  CHECK(now.exit_code != 0);
  CHECK_THAT(now.output, Catch::Contains("already orthogonalised in phase 2"));
}

TEST_CASE("trainer plasticity: flag rules", "[trainer][plasticity]") {
  Corpus corpus;
  TempDir runs;
  const auto bad = [&](std::vector<std::string> extra, const char* message) {
    const auto r = run(kTrain, small_run(corpus.dir.path, runs / "bad", extra), runs, "bad.log");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(message));
  };
  bad({"--fire", "twice"}, "is not one of phase, now, force, off");
  bad({"--fire_targets", "all"}, "is not one of attention_qk, aggressive");
  bad({"--phase", "2", "--dash_every", "2"}, "DASH runs in phase 1 only");
  bad({"--phase", "3", "--redo_every", "2"}, "ReDo runs in phase 1 only");
  bad({"--redo_every", "2", "--redo_min_history", "5"}, "ReDo would never have enough history");
  bad({"--dash_min_factor", "0"}, "dash_min_factor");
}
