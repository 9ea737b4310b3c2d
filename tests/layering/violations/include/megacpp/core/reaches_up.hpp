// Fixture for tests/CMakeLists.txt's layering_detects_violations: core must not include nn.
#pragma once
#include "megacpp/nn/block.hpp"
