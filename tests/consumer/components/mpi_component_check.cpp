// Links through megacpp::mpi only: proves the component carries MPI's include dirs and libraries
// and that the installed megacpp/dist/mpi.hpp compiles against them (a one-rank all-reduce).
#include <cstdio>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/dist/mpi.hpp"

int main(int argc, char** argv) {
  megacpp::dist::MpiEnvironment env(&argc, &argv);
  megacpp::dist::MpiComm comm;
  double x = 1.0;
  comm.all_reduce<double, megacpp::Cpu>(&x, 1, megacpp::dist::ReduceOp::sum);
  std::printf("mpi_component_check: rank %d of %d, all_reduce %g\n", comm.rank(), comm.size(), x);
  return x == comm.size() ? 0 : 1;
}
