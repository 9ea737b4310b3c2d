/// \file
/// megacpp/dist.hpp: communicators (the Comm concept, the single-process world and the
/// in-process fake) and data parallelism over any of them. The MPI and NCCL communicators are
/// included on their own (megacpp/dist/mpi.hpp, megacpp/dist/nccl.hpp: components megacpp::mpi and
/// megacpp::nccl), so that nothing else needs <mpi.h> or <nccl.h>.
#pragma once

/// \namespace megacpp::dist
/// Distribution: communicators between the ranks of a data-parallel run.

#include "megacpp/dist/comm.hpp"
#include "megacpp/dist/data_parallel.hpp"
#include "megacpp/dist/in_process.hpp"
