// tests/cuda_emulation/emulator/shared_memory.hpp: the dynamic shared memory of the emulated blocks.
//
// A kernel declares it as `extern __shared__ __align__(N) unsigned char name[];` at block scope.
// With __shared__ emulated as thread_local, that declaration names a namespace-scope array `name`
// (C++ [basic.link]: a block-scope extern declaration names the entity of the enclosing
// namespace), which shared_memory.cpp defines, one per name the kernels use: a kernel that
// renames its array fails to link here, loudly. Blocks run one at a time, so one array per name
// is every block's own memory. A static __shared__ array (block_reduce's) becomes a block-scope
// thread_local, a static: the fibers of a block run on one OS thread, so they all see one array,
// as a block's threads see theirs (it is not filled with 0xFF before each block).
#pragma once

#include <cstddef>

namespace megacpp::cuda_emulation {

struct SharedArena {
  const char* name;  // the kernels' name for it
  unsigned char* data;
  std::size_t bytes;
};

/// Every array of dynamic shared memory the emulated kernels may declare (nullptr-terminated).
const SharedArena* shared_arenas();

}  // namespace megacpp::cuda_emulation
