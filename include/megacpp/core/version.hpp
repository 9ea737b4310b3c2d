/// \file
/// megacpp/core/version.hpp: the library's version (semantic versioning). CMake's project(VERSION)
/// must say the same: the top-level CMakeLists.txt refuses to configure otherwise, so the installed
/// package's megacppConfigVersion.cmake and this header never disagree.
#pragma once

namespace megacpp {

inline constexpr int kVersionMajor = 0;  ///< incompatible API changes
inline constexpr int kVersionMinor = 1;  ///< added functionality
inline constexpr int kVersionPatch = 0;  ///< fixes
/// "major.minor.patch".
inline constexpr const char* kVersion = "0.1.0";

}  // namespace megacpp
