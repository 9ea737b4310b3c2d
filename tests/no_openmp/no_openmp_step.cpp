// Built without OpenMP (no -fopenmp): every megacpp header must compile, and the CPU backend runs
// its kernels on one thread (backends/cpu/detail/openmp.hpp). Prints three_training_steps().
#ifdef _OPENMP
#error "no_openmp_step must be compiled without OpenMP"
#endif
#include <cstdio>

#include "no_openmp/training_steps.hpp"

int main() {
  std::fputs(megacpp::testing::three_training_steps().c_str(), stdout);
  return 0;
}
