// megacpp-train --gspo (entry_points.hpp): every model of the registry, fp32 or bf16 products.
#include <omp.h>

#include "entry_points.hpp"
#include "gspo_run.hpp"

namespace megacpp::examples {

template <class Comm>
int train_gspo_run(const TrainOptions& o, Comm& comm) {
  return with_model(o.model, [&](auto model_type, const ModelDefaults& d) {
    using Model = typename decltype(model_type)::type;
    if (o.precision == "bf16") return train_gspo<typename Model::template with_precision<Bf16Mixed>>(o, d, comm);
    return train_gspo<typename Model::template with_precision<Fp32>>(o, d, comm);
  });
}

template int train_gspo_run(const TrainOptions&, dist::SingleProcess&);

}  // namespace megacpp::examples
