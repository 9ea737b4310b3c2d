// examples/train/gspo_run.hpp: megacpp-train --gspo, reinforcement learning from execution rewards.
//
// GSPO (Zheng et al. 2025, arXiv 2507.18071; megacpp/train/gspo.hpp has the equations) on the
// problems of --eval_problems (HumanEval-style C++: prompt, test). Each step:
//   1. takes --gspo_prompts problems (every problem once per epoch, in an order shuffled per
//      epoch from the seed),
//   2. samples --gspo_group completions of each from the current policy (temperature
//      --gspo_temperature, top-k --top_k; a completion ends at the function's closing brace, at
//      EOS or after --gspo_max_tokens), the way megacpp-eval samples (eval/model_samples.hpp),
//   3. compiles and tests every completion in the evaluation harness's sandbox (eval/harness.hpp):
//      reward 1 when the tests pass, else 0 (--gspo_reward pass), or CodeRL's graded reward
//      (--gspo_reward coderl: -1 / -0.6 / -0.3 / 1 for a compile error, a runtime error, a failed
//      test, a pass; eval/rewards.hpp), which gives a model that never passes a signal,
//   4. normalises the rewards within each group (eq. 6; a group whose completions all scored the
//      same carries no signal), records the sampling policy's log-probabilities, and takes
//      --gspo_updates optimizer steps on GSPO's clipped sequence-level objective (eq. 5 and 10):
//      the first at ratio 1, the later ones off-policy, where the clipping acts.
// The optimizer is megacpp-train's (Muon + AdamW, the same LR flags and schedule, which counts
// GSPO steps); ReDo, DASH and FIRE are off. The run starts from --init (an SFT or pretrained
// checkpoint) or continues with --resume; checkpoints, metrics.jsonl (reward, objective, ratio,
// clipped share per step) and --eval_pass_every's pass@k work as in pretraining. One process:
// rollouts are not data-parallel.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/harness.hpp"
#include "eval/rewards.hpp"
#include "megacpp/train/gspo.hpp"
#include "metrics.hpp"
#include "options.hpp"
#include "pass_eval_run.hpp"
#include "run_checkpoint.hpp"
#include "trained_model.hpp"

namespace megacpp::examples {

/// The problems of GSPO step `step` (0-based): indices into `count` problems, each problem once
/// per epoch in an order shuffled per epoch from `seed`.
inline std::vector<std::size_t> gspo_step_problems(std::int64_t step, std::int64_t per_step, std::size_t count,
                                                   std::uint64_t seed) {
  std::vector<std::size_t> out;
  for (std::int64_t i = step * per_step; i < (step + 1) * per_step; ++i) {
    const auto epoch = static_cast<std::uint64_t>(i) / count;
    std::vector<std::size_t> order(count);
    std::iota(order.begin(), order.end(), std::size_t{0});
    Rng rng(seed ^ (0xA24BAED4963EE407ull * (epoch + 1)));
    for (std::size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[rng.next_u64() % k]);
    out.push_back(order[static_cast<std::size_t>(i) % count]);
  }
  return out;
}

/// Runs (or resumes) GSPO on Model; returns the process exit code (common/cli.hpp).
template <class Model, class Comm>
int train_gspo(const TrainOptions& o, const ModelDefaults& d, Comm& comm) {
  using Clock = std::chrono::steady_clock;
  check_flag(comm.size() == 1, kTrainTool, "gspo", "runs in one process (rollouts are not data-parallel): launch "
             "megacpp-train without mpirun");
  const RunPlan p = make_plan<Model>(o, d);
  const optim::LrSchedule schedule = make_schedule(o, p);
  const std::string type_id = Model::type_id();
  const GspoFlags& g = o.gspo;

  const fs::path resume_dir = o.resume.empty() ? fs::path() : resolve_checkpoint(o.resume);
  const TrainingState saved = o.resume.empty() ? TrainingState{} : read_training_state(resume_dir / "state.json");
  const fs::path init_dir = o.init.empty() ? fs::path() : resolve_checkpoint(o.init);
  const TrainingState init = o.init.empty() ? TrainingState{} : read_training_state(init_dir / "state.json");
  const std::int64_t start = o.resume.empty() ? 0 : saved.step;
  check_flag(start < p.steps, kTrainTool, "steps", p.steps, ": the checkpoint is at step ", start,
             ", so there is nothing to do (raise --steps)");
  const data::ShardMetadata meta = data::read_shard_metadata(o.data);
  data::check_vocabulary(meta, Model::dims.vocab, (fs::path(o.data) / data::kShardMetadataFile).string());
  const TrainingState& from = o.resume.empty() ? init : saved;
  const fs::path& from_dir = o.resume.empty() ? init_dir : resume_dir;
  check(from.shards == meta, kTrainTool, "checkpoint ", from_dir.string(), " was trained with the ", from.shards.tokenizer,
        " tokenizer (", from.shards.tokenizer_hash, ") but ", o.data, " holds shards of ", meta.tokenizer, " (",
        meta.tokenizer_hash, "): use the data the model was trained on");
  check(o.resume.empty() || training_stage(saved) == "gspo", kTrainTool, "checkpoint ",
        resume_dir.string(), " is not a GSPO run: start GSPO from it with --init");
  const SampleCodec codec(kTrainTool, o.tokenizer, o.special_tokens, meta);
  check_flag(codec.available(), kTrainTool, "gspo", ": the shards' tokenizer needs its tokenizer.json (--tokenizer)");
  const std::vector<Problem> problems = read_problems(o.pass_eval.problems);
  for (const auto& problem : problems) {
    const auto tokens = static_cast<index_t>(codec.prompt(problem.prompt).size());
    check_flag(tokens + g.max_tokens <= Model::dims.max_seq, kTrainTool, "gspo_max_tokens", g.max_tokens,
               " + the prompt of \"", problem.task_id, "\" (", tokens, " tokens) exceed the model's context of ",
               Model::dims.max_seq);
  }
  HarnessOptions harness;
  find_program(harness.compiler);
  harness.jobs = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 1024u));
  ensure_writable_directory(kTrainTool, "out", o.out);
  prepare_run_directory(o.out, o.resume.empty() ? -1 : start);

  Model model(o.seed);
  optim::Hybrid<float, Cpu> opt(model, hybrid_options(o));
  const auto params = optim::collect_params<float, Cpu>(model);
  Rng rng(o.seed ^ 0x9E3779B97F4A7C15ull);
  TrainingState state;
  state.model = d.name;
  state.model_type = type_id;
  state.threads = omp_get_max_threads();
  state.phase = p.phase.number;
  state.options = resolved_options(o, p);
  state.shards = meta;
  state.post_training = {{"stage", "gspo"}};
  if (!o.resume.empty()) {
    load_checkpoint(resume_dir, model, opt, type_id);
    rng.set_state(saved.rng_state);
    state.tokens_seen = saved.tokens_seen;
    std::printf("resumed from %s at step %lld\n", resume_dir.string().c_str(), static_cast<long long>(start));
  } else {
    load_trained_weights(kTrainTool, init_dir, init, model);
    std::printf("initialised from %s (%s, step %lld)\n", init_dir.string().c_str(),
                training_stage(init).c_str(), static_cast<long long>(init.step));
  }
  enter_phase(model, p.phase, p.seq_len);
  const PassEvalRun<Model> pass_eval(kTrainTool, o.pass_eval, codec, o.top_k, o.seed);
  GspoOptions gspo;
  gspo.group_size = g.group;
  gspo.max_new_tokens = g.max_tokens;
  gspo.sampling = SamplingOptions{g.temperature, o.top_k};
  gspo.validate();
  std::printf("GSPO on %zu problems of %s: %lld steps of %lld problems x %lld completions, %lld updates per rollout, "
              "clip %g / %g, %s reward; warmup %lld, %s schedule; precision %s\n",
              problems.size(), o.pass_eval.problems.c_str(), static_cast<long long>(p.steps),
              static_cast<long long>(g.prompts), static_cast<long long>(g.group), static_cast<long long>(g.updates),
              gspo.clip_low, gspo.clip_high, g.reward.c_str(), static_cast<long long>(p.warmup_steps), o.lr_schedule.c_str(),
              Model::precision_type::name.data());
  MetricsLog metrics(fs::path(o.out) / "metrics.jsonl", o.resume.empty() ? -1 : start);
  const auto run_start = Clock::now();
  const std::int32_t bos = meta.special.bos, eos = meta.special.eos;
  const std::int64_t end = o.stop_at_step > 0 ? o.stop_at_step : p.steps;
  for (std::int64_t step = start; step < end; ++step) {
    const std::int64_t number = step + 1;
    const auto ts = Clock::now();
    // 1-2. The step's problems and their sampled completions (tokens for the policy, text for the harness).
    std::vector<Problem> chosen;
    std::vector<std::vector<std::int32_t>> prompts, completions;
    std::vector<Completion> texts;
    for (const std::size_t index : gspo_step_problems(step, g.prompts, problems.size(), o.seed)) {
      const Problem& problem = problems[index];
      chosen.push_back(problem);
      const auto prompt = codec.prompt(problem.prompt);
      for (std::int64_t s = 0; s < g.group; ++s) {
        std::string text;
        bool complete = false;
        const auto sequence = generate(model, prompt, g.max_tokens, gspo.sampling, rng, bos, [&](std::int32_t t) {
          if (t == eos) return false;
          text += codec.text(t);
          truncate_completion(text, problem, complete);
          return !complete;
        });
        prompts.push_back(prompt);
        completions.emplace_back(sequence.begin() + static_cast<std::ptrdiff_t>(prompt.size()), sequence.end());
        texts.push_back({problem.task_id, truncate_completion(text, problem, complete)});
      }
    }
    // 3. Rewards from the harness's verdicts.
    const EvalReport report = evaluate_completions(chosen, texts, harness);
    std::vector<double> rewards;
    double passed = 0, built = 0;
    for (const auto& result : report.results) {
      rewards.push_back(execution_reward(result, g.reward));
      passed += result.passed;
      built += result.compiled();
    }
    const std::vector<double> advantages = group_advantages(rewards, g.group);
    std::int64_t groups_with_signal = 0;
    for (std::size_t i = 0; i < advantages.size(); i += static_cast<std::size_t>(g.group))
      groups_with_signal += std::any_of(advantages.begin() + static_cast<std::ptrdiff_t>(i),
                                        advantages.begin() + static_cast<std::ptrdiff_t>(i) + g.group,
                                        [](double a) { return a != 0; });
    // 4. The policy updates: pi_old is the policy that sampled.
    const Rollout rollout = make_rollout(model, prompts, completions, bos);
    const double lr_scale = schedule(step);
    opt.set_lr_scale(lr_scale);
    double objective = 0, ratio = 0, clipped = 0, grad_norm = 0;
    for (std::int64_t u = 0; u < g.updates && groups_with_signal > 0; ++u) {
      const auto loss = gspo_loss(model, rollout, advantages, gspo);
      backward(loss.loss);
      const auto clip = optim::clip_grad_norm(params, o.max_grad_norm, optim::NonFinitePolicy::skip);
      check(!clip.skip_step(), kTrainTool, "step ", number, ": the GSPO gradient norm is ", clip.norm,
            " (non-finite): stopped before this state was checkpointed");
      opt.step(comm);
      opt.zero_grad();
      objective += loss.objective / static_cast<double>(g.updates);
      ratio += loss.mean_ratio / static_cast<double>(g.updates);
      clipped += loss.clipped_fraction / static_cast<double>(g.updates);
      grad_norm = clip.norm;
    }
    double completion_tokens = 0;
    for (index_t i = 0; i < rollout.rows; ++i) completion_tokens += static_cast<double>(rollout.completion_length(i));
    completion_tokens /= static_cast<double>(rollout.rows);
    state.tokens_seen += rollout.rows * rollout.seq;
    const double reward = std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(rewards.size());
    const double seconds = std::chrono::duration<double>(Clock::now() - ts).count();
    nlohmann::json record = {{"step", number},
                             {"reward", reward},
                             {"pass_rate", passed / static_cast<double>(rewards.size())},
                             {"compile_rate", built / static_cast<double>(rewards.size())},
                             {"groups_with_signal", groups_with_signal},
                             {"completion_tokens", completion_tokens},
                             {"lr_scale", lr_scale},
                             {"step_seconds", seconds},
                             {"harness_seconds", report.seconds},
                             {"elapsed_s", std::chrono::duration<double>(Clock::now() - run_start).count()},
                             {"time", unix_seconds()}};
    if (groups_with_signal > 0) {
      record["gspo_objective"] = objective;
      record["gspo_ratio"] = ratio;
      record["gspo_clipped"] = clipped;
      record["grad_norm"] = grad_norm;
    }
    metrics.write(record);
    std::printf("step %lld/%lld: reward %.3f (passed %.3f, compiled %.3f), %lld of %lld groups with signal, %.1f "
                "completion tokens, %.1f s\n",
                static_cast<long long>(number), static_cast<long long>(p.steps), reward,
                passed / static_cast<double>(rewards.size()), built / static_cast<double>(rewards.size()),
                static_cast<long long>(groups_with_signal), static_cast<long long>(g.prompts), completion_tokens, seconds);
    std::fflush(stdout);
    if (pass_eval.due(number, p.steps)) {
      nlohmann::json eval = pass_eval.run(model, number, bos, eos);
      eval["elapsed_s"] = std::chrono::duration<double>(Clock::now() - run_start).count();
      eval["time"] = unix_seconds();
      metrics.write(eval);
      std::printf("step %lld: pass@1 %.3f on %lld problems x %lld samples\n", static_cast<long long>(number),
                  eval["pass@1"].get<double>(), eval["tasks"].get<long long>(),
                  static_cast<long long>(o.pass_eval.samples));
      std::fflush(stdout);
    }
    if ((o.save_every > 0 && number % o.save_every == 0) || number == end) {
      state.step = number;
      state.rng_state = rng.state();
      save_checkpoint(o.out, model, opt, state, o.keep_checkpoints, o.debug_checkpoint_pause_ms);
    }
  }
  // The share of rollouts that passed, and that compiled (the reward may be graded: --gspo_reward coderl).
  const fs::path pass_svg = fs::path(o.out) / "pass_rate.svg", compile_svg = fs::path(o.out) / "compile_rate.svg";
  write_metric_plot(metrics.path(), pass_svg, std::string("megacpp-train --gspo ") + d.name + ": rollouts that pass",
                    "pass_rate");
  write_metric_plot(metrics.path(), compile_svg, std::string("megacpp-train --gspo ") + d.name + ": rollouts that compile",
                    "compile_rate");
  std::printf("GSPO: %lld steps; checkpoint %s; metrics %s, plots %s, %s\n", static_cast<long long>(end - start),
              resolve_checkpoint(o.out).string().c_str(), metrics.path().string().c_str(), pass_svg.string().c_str(),
              compile_svg.string().c_str());
  if (o.pass_eval.every > 0)
    write_metric_plot(metrics.path(), fs::path(o.out) / "pass.svg", std::string("megacpp-train --gspo ") + d.name +
                      ": pass@1", "pass@1");
  if (end < p.steps)
    std::printf("stopped at step %lld of %lld as asked (--stop_at_step); continue with --resume %s\n",
                static_cast<long long>(end), static_cast<long long>(p.steps), o.out.c_str());
  return kExitOk;
}

}  // namespace megacpp::examples
