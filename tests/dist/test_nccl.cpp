// NcclComm on the GPUs of this machine: one rank per GPU (threads of this process, up to 2),
// every collective (reduce_scatter_v too), float and int64 (and double for broadcast), blocking
// and not. Without a GPU it prints "no CUDA device" and exits 77, which CTest reports as skipped
// (CI proves it compiles and links; it cannot prove more there).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "megacpp/dist/nccl.hpp"

using namespace megacpp;
using dist::ReduceOp;

namespace {

struct Device {};  // the backend tag the collectives are instantiated with (device memory)

int failures = 0;
void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    std::printf("FAILED on rank %d: %s\n", rank, what);
    ++failures;
  }
}

template <class T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(T));
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
  std::vector<T> host(n);
  cudaDeviceSynchronize();
  cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

void run_rank(const ncclUniqueId& id, int rank, int world) {
  cudaSetDevice(rank);
  dist::NcclComm comm(id, rank, world);
  const int n = 4;
  const double ranks_sum = world * (world - 1) / 2.0;
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(rank * 10 + i);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    float* d = to_device(values);
    comm.iall_reduce<float, Device>(d, n, op).wait();
    const auto h = to_host(d, n);
    for (int i = 0; i < n; ++i) {
      const double sum = 10 * ranks_sum + world * i;
      const double want = op == ReduceOp::sum ? sum : op == ReduceOp::avg ? sum / world : (world - 1) * 10 + i;
      expect(h[static_cast<std::size_t>(i)] == static_cast<float>(want), "all_reduce float", rank);
    }
    cudaFree(d);
  }
  std::vector<std::int64_t> ints(static_cast<std::size_t>(n * world));
  for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = rank * 100 + static_cast<std::int64_t>(i);
  std::int64_t* send = to_device(ints);
  std::int64_t* recv = to_device(std::vector<std::int64_t>(n));
  comm.reduce_scatter<std::int64_t, Device>(send, recv, n, ReduceOp::sum);
  const auto rs = to_host(recv, n);
  for (int i = 0; i < n; ++i)
    expect(rs[static_cast<std::size_t>(i)] == static_cast<std::int64_t>(100 * ranks_sum) + world * (rank * n + i),
           "reduce_scatter int64", rank);
  {  // reduce_scatter_v: rank 0's block 1 element longer than the others' (n - 1 each), avg
    std::vector<index_t> counts(static_cast<std::size_t>(world), n - 1);
    counts[0] = n;
    index_t at = 0;
    for (int r = 0; r < rank; ++r) at += counts[static_cast<std::size_t>(r)];
    const index_t total = n + (world - 1) * (n - 1), mine_count = counts[static_cast<std::size_t>(rank)];
    std::vector<float> f(static_cast<std::size_t>(total));
    for (index_t i = 0; i < total; ++i) f[static_cast<std::size_t>(i)] = static_cast<float>(rank * 10 + i);
    float* fs = to_device(f);
    float* fr = to_device(std::vector<float>(static_cast<std::size_t>(n)));
    comm.ireduce_scatter_v<float, Device>(fs, fr, counts, ReduceOp::avg).wait();
    const auto got = to_host(fr, static_cast<std::size_t>(mine_count));
    for (index_t i = 0; i < mine_count; ++i)
      expect(got[static_cast<std::size_t>(i)] == static_cast<float>((10 * ranks_sum + world * static_cast<double>(at + i)) / world),
             "reduce_scatter_v float avg", rank);
    cudaFree(fs), cudaFree(fr);
  }
  std::int64_t* all = to_device(std::vector<std::int64_t>(static_cast<std::size_t>(n * world)));
  comm.iall_gather<std::int64_t, Device>(send, n, all).wait();
  const auto ag = to_host(all, static_cast<std::size_t>(n * world));
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < n; ++i)
      expect(ag[static_cast<std::size_t>(r * n + i)] == r * 100 + i, "all_gather int64", rank);
  std::vector<double> mine(n, static_cast<double>(rank + 1));
  double* b = to_device(mine);
  comm.broadcast<double, Device>(b, n, world - 1);
  for (double v : to_host(b, n)) expect(v == world, "broadcast double", rank);
  comm.barrier();
  cudaFree(send), cudaFree(recv), cudaFree(all), cudaFree(b);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: NCCL communicator tests skipped\n");
    return 77;
  }
  const int world = devices >= 2 ? 2 : 1;
  try {
    const ncclUniqueId id = dist::NcclComm::unique_id();
    std::vector<std::thread> ranks;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r)
      ranks.emplace_back([&id, &errors, r, world] {
        try {
          run_rank(id, r, world);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    for (auto& t : ranks) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("NCCL communicator over %d GPU(s): %s\n", world, failures == 0 ? "all collectives correct" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
