/// \file
/// megacpp/train.hpp: training policies above the layers (the context curriculum's phase table;
/// data mixtures and plasticity schedules join it).
#pragma once

#include "megacpp/train/curriculum.hpp"
