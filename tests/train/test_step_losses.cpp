// StepLosses (examples/train/step_losses.hpp): megacpp-train's per-step loss bookkeeping, read
// once the step is queued. The sums must be those the trainer logged when it read each loss before
// its backward: main (or the total when there is no auxiliary loss) weighted like the gradients,
// MTP and balance losses by each micro-batch's share; the first non-finite total is named.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "step_losses.hpp"

using namespace megacpp;
using namespace megacpp::examples;

namespace {
using V = Var<float, Cpu>;
using Entry = AuxLosses<float, Cpu>::Entry;
struct Terms {  // the fields of LM::Losses that StepLosses reads
  V total, main;
  std::vector<Entry> aux;
};
V scalar(float v) { return V(CpuTensor<float>::from_host(Shape{}, {v})); }
}  // namespace

TEST_CASE("StepLosses: weighted sums in micro-batch order; the first non-finite total is named", "[train]") {
  StepLosses<Cpu> step;
  step.queue(0, 0.5, 0.25, Terms{scalar(3), scalar(2), {Entry{"mtp", scalar(4), 0.3}, Entry{"blocks.1.ffn.balance", scalar(0.5f), 0.01}}});
  step.queue(1, 1.5, 0.75, Terms{scalar(1), scalar(1), {}});
  const auto t = step.read(2);
  CHECK(t.bad_loss.empty());
  CHECK(t.loss == 0.5 * 2 + 1.5 * 1);  // the main term where auxiliary losses exist, else the total
  CHECK(t.mtp == 0.25 * 4);
  CHECK(t.mtp_computed);
  CHECK(t.balance == 0.25 * 0.5);
  CHECK(t.balance_layers == 1);
  CHECK(StepLosses<Cpu>().read(1).loss == 0.0);  // nothing queued (no learned target): nothing read

  StepLosses<Cpu> diverged;
  diverged.queue(0, 1.0, 0.5, Terms{scalar(1), scalar(1), {}});
  diverged.queue(2, 1.0, 0.5, Terms{scalar(std::numeric_limits<float>::quiet_NaN()), scalar(1), {}});
  CHECK(diverged.read(3).bad_loss == "training loss is NaN (micro-batch 3 of 3)");
  StepLosses<Cpu> infinite;
  infinite.queue(0, 1.0, 1.0, Terms{scalar(std::numeric_limits<float>::infinity()), scalar(1), {}});
  CHECK(infinite.read(1).bad_loss == "training loss is infinite (micro-batch 1 of 1)");
}
