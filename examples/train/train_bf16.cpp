// megacpp-train's bf16 runs (entry_points.hpp): the training loop of every model of the registry
// with Bf16Mixed products, compiled apart from the other precision's so a build runs both at once.
#include "backend_runs.hpp"
#ifdef MEGACPP_TRAIN_MPI
#include "megacpp/dist/mpi.hpp"
#endif

namespace megacpp::examples {
template int train_in_precision<Bf16Mixed>(const TrainOptions&, dist::SingleProcess&);
#ifdef MEGACPP_TRAIN_MPI
template int train_in_precision<Bf16Mixed>(const TrainOptions&, dist::MpiComm&);
#endif
}  // namespace megacpp::examples
