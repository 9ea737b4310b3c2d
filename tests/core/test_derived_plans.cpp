// DocumentLayout::plans (megacpp/core/kernels/derived_plans.hpp): a plan a backend derives from a
// layout is built once per (type, key), shared by the layout's copies (the autograd graph keeps
// copies for the backward), separate for another layout, and freed with the last copy.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/core/kernels/documents.hpp"

using namespace megacpp;

namespace {
// A plan that counts how often it was built and how many are alive.
struct CountedPlan {
  static inline int built = 0, alive = 0;
  index_t tiles = 0;
  explicit CountedPlan(index_t t) : tiles(t) { ++built, ++alive; }
  ~CountedPlan() { --alive; }
  CountedPlan(const CountedPlan&) = delete;
  CountedPlan& operator=(const CountedPlan&) = delete;
};
struct OtherPlan {
  index_t value = 0;
};
}  // namespace

TEST_CASE("DocumentLayout plans: built once per (type, key), shared by copies, freed with the last copy", "[documents]") {
  CountedPlan::built = CountedPlan::alive = 0;
  {
    const auto layout = DocumentLayout<Cpu>::from_lengths({{3, 5}, {8}});
    auto make = [&](index_t tiles) { return [tiles] { return std::make_shared<CountedPlan>(tiles); }; };
    const CountedPlan& first = layout.plans->get<CountedPlan>({64, 0}, make(1));
    const DocumentLayout<Cpu> copy = layout;  // what an op's backward keeps
    const CountedPlan& again = copy.plans->get<CountedPlan>({64, 0}, make(2));
    CHECK(&first == &again);
    CHECK(again.tiles == 1);
    CHECK(CountedPlan::built == 1);
    // another key, another type: their own plans
    CHECK(layout.plans->get<CountedPlan>({32, 0}, make(3)).tiles == 3);
    CHECK(layout.plans->get<OtherPlan>({64, 0}, [] { return std::make_shared<OtherPlan>(OtherPlan{7}); }).value == 7);
    CHECK(CountedPlan::built == 2);
    CHECK(layout.plans->size() == 3);
    // another layout, even with the same documents, plans on its own
    const auto other = DocumentLayout<Cpu>::from_lengths({{3, 5}, {8}});
    CHECK(&other.plans->get<CountedPlan>({64, 0}, make(4)) != &first);
    CHECK(CountedPlan::built == 3);
  }
  CHECK(CountedPlan::alive == 0);
}

TEST_CASE("DocumentLayout plans: a failed build is not kept, and threads asking at once get one plan", "[documents]") {
  CountedPlan::built = CountedPlan::alive = 0;
  const auto layout = DocumentLayout<Cpu>::single_document(2, 16);
  CHECK_THROWS_AS(layout.plans->get<CountedPlan>({1, 0}, []() -> std::shared_ptr<CountedPlan> { throw Error("test", "no plan"); }),
                  Error);
  CHECK(layout.plans->get<CountedPlan>({1, 0}, [] { return std::make_shared<CountedPlan>(5); }).tiles == 5);
  std::vector<const CountedPlan*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i)
    threads.emplace_back([&, i] { seen[i] = &layout.plans->get<CountedPlan>({2, 0}, [] { return std::make_shared<CountedPlan>(6); }); });
  for (std::thread& t : threads) t.join();
  for (const CountedPlan* p : seen) CHECK(p == seen[0]);
  CHECK(CountedPlan::built == 2);
}
