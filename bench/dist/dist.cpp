// bench_dist: data-parallel training throughput over MPI on this machine: 1 process x 1 thread
// against 2 processes x 1 thread (weak scaling: each rank trains the same micro-batch), with the
// gradients averaged by dist::DataParallel in buckets started during backward.
//
// Run it plainly: it measures world 1 itself, then re-launches itself as 2 MPI ranks
// (`mpirun -np 2 --oversubscribe [--allow-run-as-root] bench_dist --worker`), reads rank 0's
// figures and prints the JSON line. Figures:
//   tokens_per_s_world1     tokens / s of one process (forward, backward, AdamW step)
//   tokens_per_s_world2     global tokens / s of two ranks (the same per rank, plus the all-reduce)
//   scaling_efficiency      world2 / (2 x world1)
//   allreduce_gbytes_per_s  gradient bytes / time of the bucketed all-reduce alone (no compute)
//   overlap_fraction        1 - (time waiting for the all-reduce after backward) / (the all-reduce
//                           alone): the share of the communication hidden behind backward
// and ZeRO-1 (AdamW moments sharded, each bucket reduce-scattered to the owners of its
// parameters, the updated parameters all-gathered by the optimizer step):
//   tokens_per_s_world2_zero1     global tokens / s of two ranks with ZeRO-1
//   zero1_step_vs_ddp             tokens_per_s_world2_zero1 / tokens_per_s_world2
//   reduce_scatter_vs_allreduce   time of the bucketed reduce-scatter alone / the all-reduce alone
//                                 (a ring moves half the bytes: 0.5 is the bandwidth bound)
//   zero1_grad_comm_vs_ddp        (reduce-scatter + the step's parameter all-gather) / all-reduce:
//                                 ZeRO's claim is that this is 1 (the same volume as DDP)
//   zero1_state_mb_per_rank       AdamW moments this rank holds (DDP: every rank holds them all)
// Configuration: a dense "A" model, d 256, 4 layers, vocab 4096, 4 rows x 256 tokens per rank,
// fp32, AdamW, 4 MB buckets (25 MB, the DataParallel default, would make one bucket of this
// 15 MB model: nothing could start before backward ends). On a 2-core machine shared with other
// work the figures move with the load: the bench says so, it cannot control it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "megacpp/dist/data_parallel.hpp"
#include "megacpp/dist/mpi.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"

using namespace megacpp;

namespace {
inline constexpr Dims kDims{.d_model = 256, .n_layers = 4, .vocab = 4096, .max_seq = 1024};
inline constexpr AttentionSizes kAttention{.n_heads = 4, .n_kv_heads = 2};
inline constexpr MambaSizes kMamba{.d_state = 64, .headdim = 64, .expand = 2};
using Model = RecipeLM<float, Cpu, kDims, "A", kAttention, kMamba>;
constexpr index_t kBatch = 4, kSeq = 256, kDocLen = 128;
constexpr std::size_t kBucketBytes = std::size_t{4} << 20;
constexpr std::int32_t kBos = 0;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One rank's model, optimizer and fixed batch (rank-dependent data).
struct Trainer {
  Model model{0};
  optim::AdamW<float, Cpu> opt{optim::collect_params<float, Cpu>(model), optim::AdamWOptions{.lr = 1e-3}};
  DocumentLayout<Cpu> docs;
  CpuTensor<std::int32_t> in, tg;
  CpuTensor<float> mask = CpuTensor<float>::full({kBatch, kSeq}, 1.0f);

  explicit Trainer(int rank) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(kBatch * kSeq)), targets(ids.size());
    Rng rng(2 + static_cast<std::uint64_t>(rank));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = i % kDocLen == 0 ? kBos : static_cast<std::int32_t>(1 + rng.below(kDims.vocab - 1));
      targets[i] = static_cast<std::int32_t>(1 + rng.below(kDims.vocab - 1));
    }
    docs = Model::documents(ids, kBatch, kSeq, kBos);
    in = CpuTensor<std::int32_t>::from_host({kBatch, kSeq}, ids);
    tg = CpuTensor<std::int32_t>::from_host({kBatch, kSeq}, targets);
  }
  std::vector<Var<float, Cpu>> vars() {
    std::vector<Var<float, Cpu>> v;
    for (const auto& p : optim::collect_params<float, Cpu>(model)) v.push_back(p.var);
    return v;
  }
  std::size_t grad_bytes() {
    std::size_t n = 0;
    for (const auto& v : vars()) n += static_cast<std::size_t>(v.numel()) * sizeof(float);
    return n;
  }
};

// World 1: tokens / s of plain steps.
double world1(int steps) {
  Trainer t(0);
  std::vector<double> times;
  for (int s = 0; s <= steps; ++s) {
    const auto t0 = Clock::now();
    backward(t.model.loss(t.in, t.tg, t.mask, t.docs));
    t.opt.step();
    t.opt.zero_grad();
    if (s > 0) times.push_back(seconds_since(t0));  // step 0 warms up
  }
  return static_cast<double>(kBatch * kSeq) / median(times);
}

// ZeRO-1 on a rank of world 2: the step rate, the reduce-scatter alone and the optimizer's
// all-gather alone; prints "dist_zero1 ..." (rank 0).
void zero1_worker(dist::MpiComm& comm, int steps) {
  Trainer t(comm.rank());
  t.opt.shard(comm.rank(), comm.size());
  std::vector<int> owners;
  for (const auto& p : optim::collect_params<float, Cpu>(t.model)) owners.push_back(t.opt.owner(p.name));
  dist::DataParallel<float, Cpu, dist::MpiComm> dp(comm, t.vars(), {.bucket_bytes = kBucketBytes, .owners = owners});
  dp.broadcast_parameters();
  std::vector<double> step_times, scatter_times, gather_times;
  for (int s = 0; s <= steps; ++s) {
    comm.barrier();
    const auto t0 = Clock::now();
    backward(t.model.loss(t.in, t.tg, t.mask, t.docs));
    dp.finish();
    t.opt.step(comm);
    t.opt.zero_grad();
    if (s > 0) step_times.push_back(seconds_since(t0));
  }
  backward(t.model.loss(t.in, t.tg, t.mask, t.docs));
  for (int s = 0; s < std::max(3, steps); ++s) {
    comm.barrier();
    const auto t0 = Clock::now();
    dp.finish();
    scatter_times.push_back(seconds_since(t0));
  }
  // The step's all-gather alone: an lr of 0 leaves the values, the collective is the same.
  t.opt.set_lr_scale(0.0);
  for (int s = 0; s < std::max(3, steps); ++s) {
    comm.barrier();
    const auto t0 = Clock::now();
    t.opt.step(comm);
    gather_times.push_back(seconds_since(t0));
  }
  double figures[4] = {median(step_times), median(scatter_times), median(gather_times),
                       static_cast<double>(t.opt.state_bytes())};
  comm.all_reduce<double, Cpu>(figures, 4, dist::ReduceOp::max);
  if (comm.rank() == 0)
    std::printf("dist_zero1 tokens_per_s=%.6g reduce_scatter_s=%.6g step_all_gather_s=%.6g state_mb=%.4g "
                "unsharded_state_mb=%.4g ring_elements_sent=%.6g\n",
                2.0 * kBatch * kSeq / figures[0], figures[1], figures[2], figures[3] / 1048576.0,
                static_cast<double>(t.opt.unsharded_state_bytes()) / 1048576.0, dp.ring_elements_sent());
}

// A rank of world 2: prints "dist_worker ..." (rank 0) with the step rate, all-reduce rate,
// overlap, then runs the ZeRO-1 measurement.
int worker(int steps) {
  dist::MpiEnvironment env;
  dist::MpiComm comm;
  Trainer t(comm.rank());
  dist::DataParallel<float, Cpu, dist::MpiComm> dp(comm, t.vars(), {.bucket_bytes = kBucketBytes});
  dp.broadcast_parameters();
  std::vector<double> step_times, wait_times;
  for (int s = 0; s <= steps; ++s) {
    comm.barrier();
    const auto t0 = Clock::now();
    backward(t.model.loss(t.in, t.tg, t.mask, t.docs));
    const auto t1 = Clock::now();
    dp.finish();
    const double wait = seconds_since(t1);
    t.opt.step();
    t.opt.zero_grad();
    if (s > 0) step_times.push_back(seconds_since(t0)), wait_times.push_back(wait);
  }
  // The all-reduce alone: every bucket of a full set of gradients, no compute beside it.
  backward(t.model.loss(t.in, t.tg, t.mask, t.docs));
  std::vector<double> allreduce_times;
  for (int s = 0; s < std::max(3, steps); ++s) {
    comm.barrier();
    const auto t0 = Clock::now();
    dp.finish();
    allreduce_times.push_back(seconds_since(t0));
  }
  double figures[3] = {median(step_times), median(wait_times), median(allreduce_times)};
  comm.all_reduce<double, Cpu>(figures, 3, dist::ReduceOp::max);  // the slower rank sets the pace
  if (comm.rank() == 0)
    std::printf("dist_worker tokens_per_s=%.6g allreduce_gbytes_per_s=%.6g overlap_fraction=%.6g buckets=%zu "
                "grad_mb=%.2f step_s=%.6g wait_s=%.6g allreduce_s=%.6g\n",
                2.0 * kBatch * kSeq / figures[0], static_cast<double>(t.grad_bytes()) / figures[2] * 1e-9,
                std::clamp(1.0 - figures[1] / figures[2], 0.0, 1.0), dp.buckets(), t.grad_bytes() / 1048576.0,
                figures[0], figures[1], figures[2]);
  std::fflush(stdout);
  zero1_worker(comm, steps);
  return 0;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("bench_dist");
}
}  // namespace

int main(int argc, char** argv) {
  const bool is_worker = argc > 1 && std::string(argv[1]) == "--worker";
  const bool quick = argc > 2 && std::string(argv[2]) == "--quick";
  if (is_worker) {
    omp_set_num_threads(1);
    Eigen::setNbThreads(1);
    return worker(quick ? 2 : 6);
  }
  bench::BenchArgs args = bench::parse_args(argc, argv);
  omp_set_num_threads(1);  // world 1 is 1 process x 1 thread; each rank of world 2 is one thread too
  Eigen::setNbThreads(1);
  args.threads = 1;
  bench::print_system_info("bench_dist", "data parallel over MPI: 1 x 1 thread vs 2 ranks x 1 thread; dense A, d 256, "
                           "4 layers, vocab 4096, 4 x 256 tokens per rank, fp32 AdamW, 4 MB gradient buckets", args);
  std::printf("path:          dist::DataParallel over dist::MpiComm (MPI_Iallreduce, polled from backward hooks); "
              "ZeRO-1: reduce_scatter_v (MPI_Ialltoallv) to the owners, AdamW's MPI_Iallgather of parameters\n");
  std::printf("note:          figures are taken on whatever else this machine is running\n");
  const int steps = args.quick ? 2 : 6;
  const double w1 = world1(steps);
  std::printf("world 1: %.1f tokens/s\n", w1);
  std::string command = "mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2 ";
  if (geteuid() == 0) command += "--allow-run-as-root ";
  command += "'" + self_path() + "' --worker" + (args.quick ? " --quick" : "") + " 2>&1";
  std::printf("world 2: %s\n", command.c_str());
  std::fflush(stdout);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    std::fprintf(stderr, "bench_dist: could not run %s\n", command.c_str());
    return 1;
  }
  double w2 = 0, gbps = 0, overlap = 0, allreduce_s = 0;
  double z2 = 0, scatter_s = 0, gather_s = 0, state_mb = 0;
  bool found = false, found_zero1 = false;
  char line[1024];
  while (std::fgets(line, sizeof line, pipe)) {
    std::fputs(line, stdout);
    if (const char* at = std::strstr(line, "allreduce_s="); at && std::strncmp(line, "dist_worker", 11) == 0)
      std::sscanf(at, "allreduce_s=%lf", &allreduce_s);
    found = found || std::sscanf(line, "dist_worker tokens_per_s=%lf allreduce_gbytes_per_s=%lf overlap_fraction=%lf",
                                 &w2, &gbps, &overlap) == 3;
    found_zero1 = found_zero1 || std::sscanf(line, "dist_zero1 tokens_per_s=%lf reduce_scatter_s=%lf step_all_gather_s=%lf "
                                             "state_mb=%lf", &z2, &scatter_s, &gather_s, &state_mb) == 4;
  }
  const int status = pclose(pipe);
  if (!found || !found_zero1 || allreduce_s <= 0 || status != 0) {
    std::fprintf(stderr, "bench_dist: the 2-rank run failed (status %d): is mpirun installed?\n", status);
    return 1;
  }
  std::printf("{\"bench\": \"dist\", \"tokens_per_s_world1\": %.1f, \"tokens_per_s_world2\": %.1f, "
              "\"scaling_efficiency\": %.4f, \"allreduce_gbytes_per_s\": %.4f, \"overlap_fraction\": %.4f, "
              "\"tokens_per_s_world2_zero1\": %.1f, \"zero1_step_vs_ddp\": %.4f, \"reduce_scatter_vs_allreduce\": %.4f, "
              "\"zero1_grad_comm_vs_ddp\": %.4f, \"zero1_state_mb_per_rank\": %.3f}\n",
              w1, w2, w2 / (2.0 * w1), gbps, overlap, z2, z2 / w2, scatter_s / allreduce_s,
              (scatter_s + gather_s) / allreduce_s, state_mb);
  return 0;
}
