// bench/cuda_bench.cuh: what the CUDA benches share (STYLE.md rule 8): the device they ran on,
// timing with CUDA events (medians of repeated runs after warm-ups), and the JSON line.
// Without a device a CUDA bench says so, prints its JSON line with "device":"none" and exits 0,
// so the default preset can build and run it anywhere.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "json_line.hpp"
#include "megacpp/backends/cuda.cuh"

namespace megacpp::bench {

// The device's name, SM count, clocks and the CUDA versions; "" without a device.
inline std::string cuda_device_line() {
  if (!Cuda::device_available()) return "";
  cudaDeviceProp prop{};
  int runtime = 0, driver = 0, clock_khz = 0;
  MEGACPP_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  MEGACPP_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  MEGACPP_CUDA_CHECK(cudaDriverGetVersion(&driver));
  MEGACPP_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  char buf[1024];  // prop.name is at most 256 bytes
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.0f MHz max), CUDA runtime %d, driver %d", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, clock_khz / 1000.0, runtime, driver);
  return buf;
}

// Prints the bench's header; false (and the skip line plus a JSON line) without a device.
inline bool cuda_bench_start(const char* bench, const char* configuration) {
  std::printf("megacpp bench %s\nconfiguration: %s\n", bench, configuration);
  const std::string device = cuda_device_line();
  if (device.empty()) {
    std::printf("no CUDA device: bench skipped\n");
    JsonLine json(bench);
    json.add("device", std::string_view("none"));
    json.print();
    return false;
  }
  std::printf("device: %s\n", device.c_str());
  return true;
}

// Median wall time in milliseconds of `reps` runs of f after `warmups`, each timed by CUDA events
// on the default stream (the stream every megacpp CUDA kernel runs on).
inline double median_ms(const std::function<void()>& f, int warmups = 2, int reps = 10) {
  for (int i = 0; i < warmups; ++i) f();
  cudaEvent_t start, stop;
  MEGACPP_CUDA_CHECK(cudaEventCreate(&start));
  MEGACPP_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    MEGACPP_CUDA_CHECK(cudaEventRecord(start, megacpp::cuda::kStream));
    f();
    MEGACPP_CUDA_CHECK(cudaEventRecord(stop, megacpp::cuda::kStream));
    MEGACPP_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MEGACPP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  MEGACPP_CUDA_CHECK(cudaEventDestroy(start));
  MEGACPP_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace megacpp::bench
