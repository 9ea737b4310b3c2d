// Refuses direct inclusion of the CPU backend's internal headers (Eigen's habit).
#ifndef MEGACPP_CPU_BACKEND_INTERNAL
#error "megacpp/backends/cpu/detail/* are internal: #include <megacpp/backends/cpu.hpp> instead"
#endif
