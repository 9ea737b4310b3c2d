// Compiled with nvcc through megacpp::cuda from the installed headers: the CUDA backend satisfies
// the Backend contract, and with a GPU one matmul forward and backward runs on it.
// Without a device it prints "no CUDA device" and CTest reports the test as skipped.
#include <cmath>
#include <cstdio>
#include <vector>

#include <megacpp/autograd.hpp>
#include <megacpp/backends/cuda.cuh>

using namespace megacpp;

static_assert(Backend<Cuda>);

int main() {
  if (!Cuda::device_available()) {
    std::printf("no CUDA device: cuda_component_check compiled and linked, not run\n");
    return 0;
  }
  // a (2, 3) @ b (3, 2); d(sum(a b))/da = rowsum(b) broadcast over rows
  auto a = Var<float, Cuda>::parameter(Tensor<float, Cuda>::from_host({2, 3}, {1, 2, 3, 4, 5, 6}));
  auto b = Var<float, Cuda>::parameter(Tensor<float, Cuda>::from_host({3, 2}, {1, 0, 0, 1, 1, 1}));
  const auto loss = sum(matmul(a, b));
  backward(loss);
  const std::vector<float> ga = a.grad().to_host();
  const std::vector<float> expected{1, 1, 2, 1, 1, 2};
  bool ok = std::abs(loss.item() - 30.0f) < 1e-5f;
  for (std::size_t i = 0; i < ga.size(); ++i) ok = ok && std::abs(ga[i] - expected[i]) < 1e-5f;
  std::printf("cuda_component_check: loss %.1f, grad %s\n", loss.item(), ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
