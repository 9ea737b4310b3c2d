// Refuses direct inclusion of the CUDA backend's internal headers (Eigen's habit), and any
// inclusion outside nvcc: the kernels below are CUDA C++, which a host compiler cannot parse.
#if !defined(__CUDACC__)
#error "megacpp/backends/cuda.cuh needs nvcc: compile this translation unit as CUDA (a .cu file, or set_source_files_properties(... LANGUAGE CUDA))"
#endif
#ifndef MEGACPP_CUDA_BACKEND_INTERNAL
#error "megacpp/backends/cuda/detail/* are internal: #include <megacpp/backends/cuda.cuh> instead"
#endif
