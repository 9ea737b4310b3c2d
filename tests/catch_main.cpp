// The single Catch2 main shared by every megacpp test binary.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
