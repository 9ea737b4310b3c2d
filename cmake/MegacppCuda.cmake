# CUDA backend: an INTERFACE target megacpp::cuda (headers in backends/cuda, cuBLAS, CCCL).
# MEGACPP_CUDA=AUTO enables it when nvcc is found; nothing here is needed to use the CPU backend.
set(MEGACPP_HAS_CUDA OFF)
if(NOT MEGACPP_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) SASS plus PTX, which newer GPUs JIT-compile.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake before 3.25.2 does not list cuda_std_20 for nvcc (its Compiler/NVIDIA-CUDA.cmake
    # stops at C++17; 3.25.2 added -std=c++20 for nvcc >= 12), and Debian 12 ships 3.25.1:
    # declare the feature as newer CMake does, so megacpp::cuda can require it.
    if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(MEGACPP_HAS_CUDA ON)
  elseif(MEGACPP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MEGACPP_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "megacpp: no CUDA compiler found; the CUDA backend is not built")
  endif()
endif()

if(MEGACPP_HAS_CUDA)
  add_library(megacpp_cuda INTERFACE)
  add_library(megacpp::cuda ALIAS megacpp_cuda)
  target_include_directories(megacpp_cuda INTERFACE
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/backends/cuda/include>
    $<INSTALL_INTERFACE:include>)
  target_link_libraries(megacpp_cuda INTERFACE megacpp::megacpp CUDA::cudart CUDA::cublas)
  target_compile_features(megacpp_cuda INTERFACE cuda_std_20)
  target_compile_options(megacpp_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  message(STATUS "megacpp: CUDA backend enabled (architectures ${CMAKE_CUDA_ARCHITECTURES})")
endif()
