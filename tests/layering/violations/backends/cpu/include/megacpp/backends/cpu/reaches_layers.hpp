// Fixture for layering_detects_violations: a backend includes core only.
#pragma once
#include "megacpp/core/tensor.hpp"
#include "megacpp/autograd/var.hpp"
