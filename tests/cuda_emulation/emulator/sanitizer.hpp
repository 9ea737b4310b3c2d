// tests/cuda_emulation/emulator/sanitizer.hpp: MEGACPP_EMULATION_ASAN is defined when compiling
// under AddressSanitizer (GCC says so with __SANITIZE_ADDRESS__, Clang with __has_feature).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define MEGACPP_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEGACPP_EMULATION_ASAN 1
#endif
#endif
