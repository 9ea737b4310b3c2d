// Links through megacpp::nccl only: proves the component carries NCCL (and the CUDA runtime).
// ncclGetVersion needs no GPU. The NCCL communicator itself (include/megacpp/dist) is not written yet.
#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  std::printf("nccl_component_check: NCCL %d (headers %d.%d.%d)\n", version, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  return version > 0 ? 0 : 1;
}
