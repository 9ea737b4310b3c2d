// Links through megacpp::nccl only: proves the component carries NCCL (and the CUDA runtime) and
// that the installed megacpp/dist/nccl.hpp compiles against them. ncclGetVersion needs no GPU.
#include <cstdio>

#include "megacpp/dist/nccl.hpp"

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  static_assert(megacpp::dist::Waitable<megacpp::dist::NcclRequest>);
  std::printf("nccl_component_check: NCCL %d (headers %d.%d.%d)\n", version, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  return version > 0 ? 0 : 1;
}
