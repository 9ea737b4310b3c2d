// megacpp-train's fp32 runs (entry_points.hpp): the training loop of every model of the registry
// with Fp32 products, compiled apart from the other precision's so a build runs both at once.
#include "backend_runs.hpp"
#ifdef MEGACPP_TRAIN_MPI
#include "megacpp/dist/mpi.hpp"
#endif

namespace megacpp::examples {
template int train_in_precision<Fp32>(const TrainOptions&, dist::SingleProcess&);
#ifdef MEGACPP_TRAIN_MPI
template int train_in_precision<Fp32>(const TrainOptions&, dist::MpiComm&);
#endif
}  // namespace megacpp::examples
