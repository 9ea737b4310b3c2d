// megacpp-eval as a process: the shipped reference completions score pass@1 = 1 and a broken set
// 0; candidates that hang, fork-bomb, crash or exhaust memory are killed and scored as failures
// while the harness finishes normally; bad input is one line and an exit code. megacpp-train
// --eval_pass_every logs pass@k to its metrics and megacpp-eval samples from its checkpoint.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/temp_dir.hpp"
#include "train/process.hpp"
#include "train/tool_runs.hpp"

using namespace megacpp::testing;
namespace fs = std::filesystem;

namespace {
const std::string kEval = MEGACPP_EVAL_EXE;
const fs::path kProblems = fs::path(MEGACPP_EVAL_PROBLEMS_DIR) / "megacpp_cpp20.jsonl";
const fs::path kReference = fs::path(MEGACPP_EVAL_PROBLEMS_DIR) / "megacpp_cpp20_reference.jsonl";
const fs::path kTestData = MEGACPP_EVAL_TEST_DATA;

// The last line of a tool's output, parsed as JSON (null when it is not JSON).
nlohmann::json last_json_line(const std::string& output) {
  std::istringstream in(output);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return nlohmann::json::parse(last, nullptr, false);
}

void write_jsonl(const fs::path& path, const std::vector<nlohmann::json>& lines) {
  std::ofstream out(path);
  for (const auto& j : lines) out << j.dump() << "\n";
}

// Processes now owned by a uid in [first, first + count).
int processes_of_uids(unsigned first, unsigned count) {
  int n = 0;
  DIR* proc = ::opendir("/proc");
  while (const dirent* e = proc ? ::readdir(proc) : nullptr) {
    struct stat st {};
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && ::stat((std::string("/proc/") + e->d_name).c_str(), &st) == 0 &&
        st.st_uid >= first && st.st_uid < first + count)
      ++n;
  }
  if (proc) ::closedir(proc);
  return n;
}
}  // namespace

TEST_CASE("megacpp-eval: the reference solutions pass every shipped problem", "[tools][eval]") {
  TempDir dir;
  const auto r = run_process(kEval, {"--problems", kProblems.string(), "--completions", kReference.string(), "-j", "2",
                                     "--results", (dir / "results.jsonl").string()},
                             dir / "log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto summary = last_json_line(r.output);
  REQUIRE(summary.is_object());
  CHECK(summary["pass@1"].get<double>() == 1.0);
  CHECK(summary["tasks"] == 20);
  CHECK(summary["samples"] == 20);
  CHECK(summary["ngram_match"].get<double>() == Approx(1.0));  // the completions are the references
  CHECK(summary["syntax_match"].is_null());
  CHECK(summary["dataflow_match"].is_null());
  CHECK(summary["codebleu"].is_null());
  CHECK(r.output.find("megacpp/19: 1/1 passed") != std::string::npos);
  std::ifstream results(dir / "results.jsonl");
  int lines = 0;
  for (std::string line; std::getline(results, line); ++lines) CHECK(nlohmann::json::parse(line)["passed"] == true);
  CHECK(lines == 20);
}

TEST_CASE("megacpp-eval: a broken completion set scores 0", "[tools][eval]") {
  TempDir dir;
  const auto r = run_process(kEval, {"--problems", kProblems.string(), "--completions", (kTestData / "broken.jsonl").string(),
                                     "-j", "2", "--results", (dir / "results.jsonl").string()},
                             dir / "log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto summary = last_json_line(r.output);
  REQUIRE(summary.is_object());
  CHECK(summary["pass@1"].get<double>() == 0.0);
  CHECK(r.output.find("compile_error") != std::string::npos);  // half of them do not compile
  CHECK(r.output.find("signal 6: ") != std::string::npos);     // the others fail an assert (abort)
  CHECK(r.output.find("Assertion") != std::string::npos);
}

TEST_CASE("megacpp-eval: hanging, fork-bombing, crashing and memory-hungry candidates are failures", "[tools][eval]") {
  TempDir dir;
  const std::string prompt = "#include <unistd.h>\n#include <vector>\n// Returns a + b.\nlong add(long a, long b) {\n";
  const std::string test = "#undef NDEBUG\n#include <cassert>\nint main() {\n  assert(add(2, 3) == 5);\n}\n";
  write_jsonl(dir / "problems.jsonl", {{{"task_id", "t/add"}, {"prompt", prompt}, {"test", test}}});
  write_jsonl(dir / "completions.jsonl",
              {{{"task_id", "t/add"}, {"completion", "  return a + b;\n}\n"}},
               {{"task_id", "t/add"}, {"completion", "  volatile long spin = 0;\n  for (;;) ++spin;\n}\n"}},
               {{"task_id", "t/add"}, {"completion", "  for (;;) fork();\n}\n"}},
               {{"task_id", "t/add"}, {"completion", "  volatile long* p = nullptr;\n  return *p + a + b;\n}\n"}},
               {{"task_id", "t/add"},
                {"completion", "  std::vector<char> v(std::size_t{8} << 30, 1);\n  return a + b + v[12345];\n}\n"}}});
  // The candidates' temporary directories go under dir/tmp (TMPDIR), to be checked afterwards.
  fs::create_directories(dir / "tmp");
  fs::permissions(dir / "tmp", fs::perms::all);
  const char* saved_tmpdir = std::getenv("TMPDIR");
  const std::string saved = saved_tmpdir ? saved_tmpdir : "";
  ::setenv("TMPDIR", (dir / "tmp").c_str(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_process(kEval, {"--problems", (dir / "problems.jsonl").string(), "--completions",
                                     (dir / "completions.jsonl").string(), "-j", "2", "--timeout", "2", "--memory_mb",
                                     "256", "--results", (dir / "results.jsonl").string()},
                             dir / "log");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (saved_tmpdir) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(seconds < 60);
  const auto summary = last_json_line(r.output);
  REQUIRE(summary.is_object());
  CHECK(summary["pass@1"].get<double>() == Approx(0.2));
  CHECK(summary["pass@2"].get<double>() == Approx(0.4));  // 1 - C(4,2)/C(5,2)
  CHECK(summary["pass@5"].get<double>() == Approx(1.0));
  std::vector<nlohmann::json> results;
  std::ifstream in(dir / "results.jsonl");
  for (std::string line; std::getline(in, line);) results.push_back(nlohmann::json::parse(line));
  REQUIRE(results.size() == 5);
  CHECK(results[0]["status"] == "passed");
  CHECK(results[1]["status"] == "timeout");
  CHECK(results[2]["passed"] == false);
  CHECK(results[2]["seconds"].get<double>() < 20);
  CHECK(results[3]["status"] == "signal 11");
  CHECK(results[4]["passed"] == false);  // std::bad_alloc under RLIMIT_AS: terminate, SIGABRT
  if (::geteuid() == 0) CHECK(processes_of_uids(1900000000u, 2048u * 1024u) == 0);  // nothing of the fork bomb survives
  CHECK(fs::is_empty(dir / "tmp"));  // every candidate's temporary directory is removed
}

TEST_CASE("megacpp-eval: MultiPL-E problems, whose test closes the function", "[tools][eval]") {
  TempDir dir;
  write_jsonl(dir / "problems.jsonl",
              {{{"task_id", "HumanEval_0_add"}, {"prompt", "long add(long x, long y) {\n"},
                {"test", "}\n#undef NDEBUG\n#include <cassert>\nint main() {\n  auto candidate = add;\n  assert(candidate(1, 2) == 3);\n}\n"}}});
  write_jsonl(dir / "completions.jsonl", {{{"task_id", "HumanEval_0_add"}, {"completion", "  return x + y;"}},
                                          {{"task_id", "HumanEval_0_add"}, {"completion", "  return x - y;"}}});
  const auto r = run_process(kEval, {"--problems", (dir / "problems.jsonl").string(), "--completions",
                                     (dir / "completions.jsonl").string()},
                             dir / "log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto summary = last_json_line(r.output);
  CHECK(summary["pass@1"].get<double>() == Approx(0.5));
  CHECK(summary["pass@2"].get<double>() == Approx(1.0));
  CHECK(summary["ngram_match"].is_null());  // no canonical_solution: no reference to score against
}

TEST_CASE("megacpp-eval: bad input is one line and an exit code", "[tools][eval]") {
  TempDir dir;
  write_jsonl(dir / "unknown.jsonl", {{{"task_id", "megacpp/99"}, {"completion", "}"}}});
  auto r = run_process(kEval, {"--problems", kProblems.string(), "--completions", (dir / "unknown.jsonl").string()}, dir / "log");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("task_id \"megacpp/99\" is not in the problems file") != std::string::npos);
  write_jsonl(dir / "partial.jsonl", {{{"task_id", "megacpp/0"}, {"completion", "}"}}});
  r = run_process(kEval, {"--problems", kProblems.string(), "--completions", (dir / "partial.jsonl").string()}, dir / "log");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("19 of 20 problems have no completion") != std::string::npos);
  std::ofstream(dir / "garbage.jsonl") << "{\"task_id\": 3}\n";
  r = run_process(kEval, {"--problems", (dir / "garbage.jsonl").string(), "--completions", kReference.string()}, dir / "log");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("garbage.jsonl:1: \"task_id\" is not a string") != std::string::npos);
  r = run_process(kEval, {"--problems", kProblems.string()}, dir / "log");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("exactly one of --completions and --checkpoint") != std::string::npos);
  r = run_process(kEval, {"--completions", kReference.string(), "--cxx", "no-such-compiler-xyz"}, dir / "log");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("\"no-such-compiler-xyz\" is not in PATH") != std::string::npos);
  r = run_process(kEval, {"--completions", kReference.string(), "--jobs", "0"}, dir / "log");
  CHECK(r.exit_code == 2);
}

TEST_CASE("megacpp-train --eval_pass_every logs pass@k, megacpp-eval samples from its checkpoint", "[tools][eval]") {
  Corpus corpus;
  TempDir dir;
  // three of the shipped problems keep the test short
  {
    std::ifstream in(kProblems);
    std::ofstream out(dir / "problems.jsonl");
    std::string line;
    for (int i = 0; i < 3 && std::getline(in, line); ++i) out << line << "\n";
  }
  const auto out = dir / "run";
  auto r = run_process(kTrain, small_run(corpus.dir.path, out, {"--eval_pass_every", "4", "--eval_samples", "2",
                                                                 "--eval_max_tokens", "24", "--eval_problems",
                                                                 (dir / "problems.jsonl").string()}),
                       dir / "train.log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("step 4: pass@1 ") && Catch::Contains("on 3 problems x 2 samples"));
  std::vector<nlohmann::json> evals;
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("pass@1")) evals.push_back(j);
  }
  REQUIRE(evals.size() == 2);
  CHECK(evals[0]["step"] == 4);
  CHECK(evals[1]["step"] == 8);
  for (const auto& e : evals) {
    CHECK(e["pass@1"].get<double>() >= 0.0);
    CHECK(e["pass@2"].get<double>() <= 1.0);
    CHECK(e["samples"] == 6);
    CHECK(e["syntax_match"].is_null());
  }
  CHECK(fs::exists(out / "pass.svg"));
  CHECK_THAT(file_bytes(out / "pass.svg"), Catch::Contains("<circle"));

  r = run_process(kEval, {"--problems", (dir / "problems.jsonl").string(), "--checkpoint", out.string(), "--samples", "3",
                          "--max_tokens", "24", "--results", (dir / "results.jsonl").string()},
                  dir / "eval.log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto summary = last_json_line(r.output);
  REQUIRE(summary.is_object());
  CHECK(summary["samples"] == 9);
  CHECK(summary.contains("pass@2"));
  CHECK_FALSE(summary.contains("pass@5"));
  CHECK_THAT(r.output, Catch::Contains("sampled 9 completions (3 per problem)"));

  // flags checked before any training
  r = run_process(kTrain, small_run(corpus.dir.path, dir / "bad", {"--eval_pass_every", "4", "--eval_samples", "0"}),
                  dir / "bad.log");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--eval_samples"));
  r = run_process(kTrain, small_run(corpus.dir.path, dir / "bad", {"--eval_pass_every", "4", "--eval_max_tokens", "5000"}),
                  dir / "bad.log");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("exceed the model's context of 4096"));
}

TEST_CASE("megacpp-eval: a completion that never returns a value does not pass by luck", "[tools][eval]") {
  // Flowing off the end of a non-void function is undefined behaviour; at -O0 the register may
  // hold a value that satisfies the asserts. -Werror=return-type (the default flags) refuses it.
  TempDir dir;
  write_jsonl(dir / "problems.jsonl",
              {{{"task_id", "t/is_positive"}, {"prompt", "bool is_positive(long x) {\n"},
                {"test", "#undef NDEBUG\n#include <cassert>\nint main() {\n  assert(is_positive(3));\n}\n"}}});
  write_jsonl(dir / "completions.jsonl", {{{"task_id", "t/is_positive"}, {"completion", "  (void)x;\n}\n"}}});
  const auto r = run_process(kEval, {"--problems", (dir / "problems.jsonl").string(), "--completions",
                                     (dir / "completions.jsonl").string()},
                             dir / "log");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(last_json_line(r.output)["pass@1"].get<double>() == 0.0);
  CHECK_THAT(r.output, Catch::Contains("compile_error") && Catch::Contains("return-type"));
}
