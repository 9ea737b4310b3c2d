// megacpp/megacpp.hpp: everything in the core library with the CPU backend.
// CUDA users include <megacpp/backends/cuda.cuh> in addition (nvcc only).
#pragma once

#include "megacpp/autograd.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/core.hpp"
