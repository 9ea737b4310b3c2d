# Distribution components: INTERFACE targets megacpp::mpi and megacpp::nccl.
#
# The communicators (include/megacpp/dist: MpiComm, NcclComm) land later; the targets exist now so
# that the build tree, the installed package (cmake/megacppConfig.cmake.in) and the conan/vcpkg
# recipes name the same things. Each finds its dependency only when asked for: MEGACPP_MPI /
# MEGACPP_NCCL here, `find_package(megacpp COMPONENTS mpi nccl)` for an installed megacpp.
option(MEGACPP_NCCL "Build the NCCL communicator component (needs the CUDA backend)" OFF)

if(MEGACPP_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  add_library(megacpp_mpi INTERFACE)
  add_library(megacpp::mpi ALIAS megacpp_mpi)
  target_link_libraries(megacpp_mpi INTERFACE megacpp::megacpp MPI::MPI_CXX)
  message(STATUS "megacpp: MPI component enabled (MPI ${MPI_CXX_VERSION})")
endif()

if(MEGACPP_NCCL)
  if(NOT MEGACPP_HAS_CUDA)
    message(FATAL_ERROR "MEGACPP_NCCL=ON needs the CUDA backend: set MEGACPP_CUDA=ON (nvcc must be found)")
  endif()
  find_package(NCCL REQUIRED)  # cmake/FindNCCL.cmake: NCCL ships no CMake config
  add_library(megacpp_nccl INTERFACE)
  add_library(megacpp::nccl ALIAS megacpp_nccl)
  target_link_libraries(megacpp_nccl INTERFACE megacpp::cuda NCCL::NCCL)
  message(STATUS "megacpp: NCCL component enabled (NCCL ${NCCL_VERSION})")
endif()
