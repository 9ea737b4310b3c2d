// CPU backend: Eigen's Core, included once with the warning workaround every kernel needs.
#pragma once

// GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsic headers when Eigen
// inlines them (GCC bug 105593, fixed in GCC 13). The diagnostic is attributed to the intrinsic
// header's lines, so ignoring it while those headers are first included silences exactly it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
