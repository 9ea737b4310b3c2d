# Distribution components: INTERFACE targets megacpp::mpi and megacpp::nccl.
#
# megacpp::mpi brings include/megacpp/dist/mpi.hpp's MpiComm (MPI::MPI_CXX), megacpp::nccl
# include/megacpp/dist/nccl.hpp's NcclComm (megacpp::cuda + NCCL::NCCL). The build tree, the
# installed package (cmake/megacppConfig.cmake.in) and the conan/vcpkg recipes name the same
# targets. MEGACPP_MPI / MEGACPP_NCCL: ON requires the dependency, AUTO (the default of a
# top-level build) enables the component where it is found, OFF skips it. MEGACPP_HAS_MPI and
# MEGACPP_HAS_NCCL say what was enabled.
set(MEGACPP_HAS_MPI OFF)
set(MEGACPP_HAS_NCCL OFF)

if(MEGACPP_MPI STREQUAL "AUTO")
  find_package(MPI QUIET COMPONENTS CXX)
elseif(MEGACPP_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
endif()
if(MEGACPP_MPI AND MPI_CXX_FOUND)
  add_library(megacpp_mpi INTERFACE)
  add_library(megacpp::mpi ALIAS megacpp_mpi)
  target_link_libraries(megacpp_mpi INTERFACE megacpp::megacpp MPI::MPI_CXX)
  set(MEGACPP_HAS_MPI ON)
  find_program(MEGACPP_MPIEXEC NAMES mpirun mpiexec HINTS "${MPIEXEC_EXECUTABLE}")
  message(STATUS "megacpp: MPI component enabled (MPI ${MPI_CXX_VERSION}; launcher ${MEGACPP_MPIEXEC})")
elseif(MEGACPP_MPI STREQUAL "AUTO")
  message(STATUS "megacpp: MPI not found, MPI component off (install libopenmpi-dev openmpi-bin)")
endif()

if(MEGACPP_NCCL STREQUAL "AUTO")
  if(MEGACPP_HAS_CUDA)
    find_package(NCCL QUIET)  # cmake/FindNCCL.cmake: NCCL ships no CMake config
  endif()
elseif(MEGACPP_NCCL)
  if(NOT MEGACPP_HAS_CUDA)
    message(FATAL_ERROR "MEGACPP_NCCL=ON needs the CUDA backend: set MEGACPP_CUDA=ON (nvcc must be found)")
  endif()
  find_package(NCCL REQUIRED)
endif()
if(MEGACPP_NCCL AND MEGACPP_HAS_CUDA AND NCCL_FOUND)
  add_library(megacpp_nccl INTERFACE)
  add_library(megacpp::nccl ALIAS megacpp_nccl)
  target_link_libraries(megacpp_nccl INTERFACE megacpp::cuda NCCL::NCCL)
  set(MEGACPP_HAS_NCCL ON)
  message(STATUS "megacpp: NCCL component enabled (NCCL ${NCCL_VERSION})")
endif()
