// megacpp-prepare --stream and megacpp-train's mixtures as processes: named stream shards, the
// phase's mixture by default, --mix and its usage errors (exit 2 naming the value), and a resumed
// run that stays bitwise identical with the mixture loader's position in the checkpoint.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "megacpp/data.hpp"
#include "run_checkpoint.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp;
using namespace megacpp::examples;
using megacpp::testing::Corpus;
using megacpp::testing::ProcessResult;
using megacpp::testing::TempDir;
using megacpp::testing::kPrepare;
using megacpp::testing::kTrain;
using megacpp::testing::run;
using megacpp::testing::small_run;

namespace {
// Three source trees: documented C++ functions (code), prose (text) and formulas (math).
void write_stream_sources(const fs::path& root) {
  fs::create_directories(root / "code");
  fs::create_directories(root / "text");
  fs::create_directories(root / "math");
  for (int i = 0; i < 40; ++i) {
    std::ofstream(root / "code" / ("f" + std::to_string(i) + ".cpp"))
        << "#include <cstdio>\n// Returns " << i << " times x.\nint times" << i << "(int x) {\n  return " << i
        << " * x;\n}\nint main() { std::printf(\"%d\\n\", times" << i << "(3)); }\n";
    std::ofstream(root / "text" / ("t" + std::to_string(i) + ".md"))
        << "Note " << i << ": a function should say what it returns, and tests should say why they can fail.\n";
    std::ofstream(root / "math" / ("m" + std::to_string(i) + ".tex"))
        << "$\\sum_{k=1}^{" << i << "} k = " << i * (i + 1) / 2 << "$ and $" << i << "^2 = " << i * i << "$\n";
  }
}

ProcessResult expect_exit(const std::vector<std::string>& args, const TempDir& dir, int code, const std::string& message) {
  const ProcessResult r = run(kTrain, args, dir, "usage.log");
  INFO(r.output);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == code);
  CHECK_THAT(r.output, Catch::Contains(message));
  return r;
}
}  // namespace

TEST_CASE("mixtures: prepare --stream, the phase's mixture, --mix errors, bitwise resume", "[trainer][mixture]") {
  TempDir dir;
  write_stream_sources(dir / "src");
  const fs::path shards = dir / "shards";
  const auto prep = run(kPrepare,
                        {"--stream", "code=" + (dir / "src" / "code").string(), "--stream",
                         "text=" + (dir / "src" / "text").string(), "--stream", "math=" + (dir / "src" / "math").string(),
                         "--output", shards.string(), "--val_fraction", "0.2"},
                        dir, "prepare.log");
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  CHECK_THAT(prep.output, Catch::Contains("stream code:") && Catch::Contains("stream math:"));
  CHECK_THAT(prep.output, Catch::Contains("had a documented function"));
  for (const char* name : {"code", "text", "math"}) {
    CHECK(fs::exists(shards / ("train_" + std::string(name) + "_000000.bin")));
    CHECK(fs::exists(shards / ("val_" + std::string(name) + "_000000.bin")));
  }
  CHECK(!fs::exists(shards / "train_000000.bin"));

  TempDir runs;
  SECTION("phase 1's mixture by default; k steps + resume == N steps, bitwise") {
    const auto straight = run(kTrain, small_run(shards, runs / "straight"), runs, "straight.log");
    INFO(straight.output);
    REQUIRE(straight.exit_code == 0);
    CHECK_THAT(straight.output, Catch::Contains("mixture code=0.7,text=0.2,math=0.1"));
    const auto first = run(kTrain, small_run(shards, runs / "split", {"--stop_at_step", "3"}), runs, "a.log");
    REQUIRE(first.exit_code == 0);
    const auto second = run(kTrain, small_run(shards, runs / "split", {"--resume"}), runs, "b.log");
    INFO(second.output);
    REQUIRE(second.exit_code == 0);
    const fs::path a = resolve_checkpoint(runs / "straight"), b = resolve_checkpoint(runs / "split");
    REQUIRE(b.filename() == "step_00000008");
    CHECK(megacpp::testing::file_bytes(a / "model.safetensors") == megacpp::testing::file_bytes(b / "model.safetensors"));
    CHECK(megacpp::testing::file_bytes(a / "optimizer.safetensors") ==
          megacpp::testing::file_bytes(b / "optimizer.safetensors"));
    const auto sa = read_training_state(a / "state.json"), sb = read_training_state(b / "state.json");
    REQUIRE(sa.train_mixture.has_value());
    CHECK(sa.train_mixture == sb.train_mixture);
    CHECK(sa.train_mixture->streams.size() == 3);
    // The checkpoint after step 3 differs from the end: the loader moved on.
    const auto s3 = read_training_state(runs / "split" / "step_00000003" / "state.json");
    REQUIRE(s3.train_mixture.has_value());
    CHECK(s3.train_mixture != sb.train_mixture);
    // Resuming on data with one unnamed stream is refused.
    Corpus corpus;
    const auto wrong = run(kTrain, small_run(corpus.dir.path, runs / "split", {"--resume", "--steps", "9"}), runs, "c.log");
    CHECK(wrong.exit_code == 1);
    CHECK_THAT(wrong.output, Catch::Contains("was trained on named streams"));
  }
  SECTION("--mix replaces it; phase 2's mixture names no math") {
    const auto mixed = run(kTrain, small_run(shards, runs / "mix", {"--mix", "code=0.6,text=0.4", "--steps", "3"}), runs,
                           "mix.log");
    INFO(mixed.output);
    CHECK(mixed.exit_code == 0);
    CHECK_THAT(mixed.output, Catch::Contains("mixture code=0.6,text=0.4"));
    const auto phase2 = run(kTrain, small_run(shards, runs / "p2", {"--phase", "2", "--steps", "3"}), runs, "p2.log");
    INFO(phase2.output);
    CHECK(phase2.exit_code == 0);
    CHECK_THAT(phase2.output, Catch::Contains("mixture code=0.7,text=0.3 "));
  }
  SECTION("bad --mix values are usage errors naming the value") {
    const auto args = [&](const std::string& mix) { return small_run(shards, runs / "bad", {"--mix", mix}); };
    expect_exit(args("code=0.7,text=0.2"), runs, 2, "sum to 0.9, not 1");
    expect_exit(args("code=-0.5,text=1.5"), runs, 2, "weight -0.5 of code is outside [0, 1]");
    expect_exit(args("code=0.5,prose=0.5"), runs, 2, "unknown stream \"prose\" (the data in");
    expect_exit(args("code=x"), runs, 2, "--mix \"code=x\": mixture: weight \"x\" of code is not a number");
    Corpus corpus;
    expect_exit(small_run(corpus.dir.path, runs / "bad", {"--mix", "code=1"}), runs, 2, "is one unnamed stream");
    CHECK(!fs::exists(runs / "bad" / "latest"));
  }
}

TEST_CASE("mixtures: prepare --stream usage errors", "[tools][mixture]") {
  TempDir dir;
  write_stream_sources(dir / "src");
  const auto prep = [&](std::vector<std::string> args, int code, const std::string& message) {
    args.insert(args.end(), {"--output", (dir / "out").string()});
    const ProcessResult r = run(kPrepare, args, dir, "prepare.log");
    INFO(r.output);
    CHECK(r.exit_code == code);
    CHECK_THAT(r.output, Catch::Contains(message));
  };
  prep({"--stream", "Code=" + (dir / "src" / "code").string()}, 2, "name \"Code\" must be 1-32 lowercase letters");
  prep({"--stream", "code"}, 2, "\"code\" is not NAME=DIR");
  prep({"--stream", "code=" + (dir / "src" / "code").string(), "--input", (dir / "src" / "code").string()}, 2,
       "cannot be combined with --input");
  prep({}, 2, "--input or --stream is required");
  prep({"--stream", "code=" + (dir / "nowhere").string()}, 1, "does not exist");
}
