// Fixture for layering_detects_violations: no nn header may include a backend.
#pragma once
#include <megacpp/backends/cpu.hpp>
