// Links through megacpp::mpi only: proves the component carries MPI's include dirs and libraries.
// The MPI communicator itself (include/megacpp/dist) is not written yet.
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::printf("mpi_component_check: rank %d of %d\n", rank, size);
  MPI_Finalize();
  return size >= 1 ? 0 : 1;
}
