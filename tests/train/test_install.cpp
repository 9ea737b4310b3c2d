// `cmake --install` of the tools (MEGACPP_INSTALL_TOOLS): the installed megacpp-train finds the
// installed built-in corpus by itself (examples/common/install_paths.hpp) and trains on it, and the
// other installed tools start; megacpp-eval scores the installed reference completions against the
// installed problems. The install goes to a temporary prefix, component megacpp_tools only.
#include <catch2/catch.hpp>

#include "data/temp_dir.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using megacpp::testing::TempDir;
using megacpp::testing::run;

TEST_CASE("install: the installed tools run, and megacpp-train defaults to the installed corpus", "[trainer][install]") {
  TempDir prefix;
  const auto install = run(MEGACPP_CMAKE_COMMAND,
                           {"--install", MEGACPP_BUILD_DIR, "--prefix", prefix.path.string(), "--component", "megacpp_tools"},
                           prefix, "install.log");
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
  const auto bin = prefix / "bin";
  const auto corpus = prefix / "share" / "megacpp" / "corpus";
  REQUIRE(std::filesystem::exists(corpus / "shards.json"));
  CHECK_FALSE(std::filesystem::exists(corpus / "corpus.stamp"));

  // No --data: the installed corpus, found relative to the installed executable.
  const auto train = run((bin / "megacpp-train").string(),
                         {"--out", (prefix / "run").string(), "--seq_len", "32", "--micro_batch", "2",
                          "--total_batch_size", "128", "--steps", "2", "--warmup_steps", "1", "--eval_every", "2",
                          "--val_tokens", "256", "--sample_tokens", "0"},
                         prefix, "train.log");
  INFO(train.output);
  CHECK(train.exit_code == 0);
  CHECK_THAT(train.output, Catch::Contains("data " + corpus.string()));
  // megacpp-eval finds the problems installed beside it (share/megacpp/eval) when --problems is left out.
  const auto eval = run((bin / "megacpp-eval").string(),
                        {"--completions", (prefix / "share" / "megacpp" / "eval" / "megacpp_cpp20_reference.jsonl").string()},
                        prefix, "eval.log");
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains("\"pass@1\":1.0"));
  for (const char* tool : {"megacpp-generate", "megacpp-prepare", "megacpp-eval"}) {
    const auto help = run((bin / tool).string(), {"--help"}, prefix, "help.log");
    INFO(tool << ": " << help.output);
    CHECK(help.exit_code == 0);
  }
}
