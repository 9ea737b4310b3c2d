/// \file
/// megacpp/train.hpp: training policies above the layers (the context curriculum's phase table;
/// the MTP loss weight by tokens seen; data mixtures and plasticity schedules join it).
#pragma once

#include "megacpp/train/curriculum.hpp"
#include "megacpp/train/gspo.hpp"
#include "megacpp/train/mtp_schedule.hpp"
