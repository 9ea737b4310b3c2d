// tests/cuda_emulation/device_lines.hpp: where a line of the CUDA backend's device code is, for the
// tests that inject a fault there (Options::skip_barrier_line) and must name the line without
// hard-coding its number. MEGACPP_EMULATION_DEVICE_DIR is the backend's detail/ folder (set by
// the CMakeLists).
#pragma once

#include <fstream>
#include <string>

namespace megacpp::cuda_emulation {

/// The number of the first line of detail/<file> that contains `text` (0 if none).
inline unsigned device_line(const std::string& file, const std::string& text) {
  std::ifstream in(std::string(MEGACPP_EMULATION_DEVICE_DIR) + "/" + file);
  std::string line;
  for (unsigned n = 1; std::getline(in, line); ++n)
    if (line.find(text) != std::string::npos) return n;
  return 0;
}

}  // namespace megacpp::cuda_emulation
