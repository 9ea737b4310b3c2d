/// \file
/// megacpp/dist.hpp: communicators (the GatherComm concept, the single-process world and the
/// in-process fake); MPI and NCCL communicators and data parallelism join this folder.
#pragma once

/// \namespace megacpp::dist
/// Distribution: communicators between the ranks of a data-parallel run.

#include "megacpp/dist/comm.hpp"
#include "megacpp/dist/in_process.hpp"
