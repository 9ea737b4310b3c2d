// Bad input at the API boundary: each case throws megacpp::Error whose message names the values.
#include "support/op_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

TEST_CASE("mismatched shapes name the op and both shapes", "[errors]") {
  auto a = random_param({4, 8}, 1), b = random_param({7, 2}, 2), c = random_param({3, 5}, 3);
  CHECK_THROWS_AS(matmul(a, b), Error);
  CHECK_THROWS_WITH(matmul(a, b), Contains("matmul: inner dims differ: (4, 8) x (7, 2)"));
  auto batched_a = random_param({2, 3, 4}, 4), batched_b = random_param({3, 4, 5}, 5);
  CHECK_THROWS_WITH(matmul(batched_a, batched_b), Contains("batch dims differ"));
  CHECK_THROWS_WITH(add(a, c), Contains("add: shapes (4, 8) and (3, 5) do not broadcast"));
  CHECK_THROWS_WITH((mul(a, random_param({4}, 6))), Contains("mul: shapes (4, 8) and (4)"));
  CHECK_THROWS_WITH((rmsnorm(a, random_param({7}, 7))), Contains("rmsnorm: gain shape (7) must be (8)"));
  CHECK_THROWS_WITH((concat<double, Cpu>({a, c}, 0)), Contains("concat: shape (3, 5) does not match (4, 8)"));
  CHECK_THROWS_WITH(slice(a, 1, 2, 9), Contains("slice: range [2, 9) out of bounds for axis 1 of shape (4, 8)"));
  CHECK_THROWS_WITH((reshape(a, {3, -1})), Contains("cannot infer -1"));
  CHECK_THROWS_WITH(sum(a, 2), Contains("axis 2 out of range for shape (4, 8)"));
}

TEST_CASE("out-of-range gather index names the id and the vocabulary", "[errors]") {
  auto table = random_param({10, 4}, 1);
  const auto too_big = CpuTensor<std::int32_t>::from_host({3}, {1, 10, 2});
  const auto negative = CpuTensor<std::int32_t>::from_host({2}, {-3, 2});
  CHECK_THROWS_AS(embedding(table, too_big), Error);
  CHECK_THROWS_WITH(embedding(table, too_big), Contains("embedding: token id 10 >= 10"));
  CHECK_THROWS_WITH(embedding(table, negative), Contains("token id -3 is negative"));
  CHECK_THROWS_WITH((embedding(random_param({10}, 2), too_big)), Contains("table must be (vocab, dim), got shape (10)"));
}

TEST_CASE("BoundedIds: checked where ids enter, only the bound compared where they are used", "[errors]") {
  const auto ids = CpuTensor<std::int32_t>::from_host({3}, {1, 9, 2});
  CHECK_THROWS_WITH(BoundedIds<Cpu>::checked("loader", ids, 9, "token"), Contains("loader: token id 9 >= 9"));
  CHECK_THROWS_WITH(BoundedIds<Cpu>::checked("loader", CpuTensor<std::int32_t>::from_host({1}, {-2}), 9, "token"),
                    Contains("token id -2 is negative"));
  const BoundedIds<Cpu> ten = BoundedIds<Cpu>::checked("loader", ids, 10, "token");
  CHECK(ten.bound() == 10);
  CHECK(ten.numel() == 3);
  CHECK(BoundedIds<Cpu>::checked("loader", CpuTensor<std::int32_t>(Shape{0}), 0, "token").numel() == 0);
  // Host ids are checked on the host, naming the position.
  CHECK_THROWS_WITH(BoundedIds<Cpu>::from_host("decode", Shape{3}, {1, 2, 12}, 10, "token"),
                    Contains("decode: token id 12 at [2] is outside [0, 10)"));
  CHECK_THROWS_WITH(BoundedIds<Cpu>::from_host("decode", Shape{2}, {-1, 2}, 10, "token"),
                    Contains("token id -1 at [0]"));
  const BoundedIds<Cpu> host = BoundedIds<Cpu>::from_host("decode", Shape{1, 2}, {9, 0}, 10, "token");
  CHECK((host.ids().shape() == Shape{1, 2} && host.ids().to_host() == std::vector<std::int32_t>{9, 0}));
  // They keep the host copy they were checked from (for host-side consumers); checked ids have none.
  REQUIRE(host.host() != nullptr);
  CHECK(*host.host() == std::vector<std::int32_t>{9, 0});
  CHECK(ten.host() == nullptr);
  // A table with fewer rows than the bound is refused without reading the ids.
  CHECK_THROWS_WITH(embedding(random_param({9, 4}, 1), ten),
                    Contains("embedding: token ids bounded by 10 index 9 rows"));
  CHECK(embedding(random_param({10, 4}, 1), ten).shape() == Shape{3, 4});
  // A write into the ids' storage (through any copy) after the check is refused: the bound no
  // longer says anything about them.
  auto writable = CpuTensor<std::int32_t>::from_host({2}, {0, 1});
  const BoundedIds<Cpu> checked_once = BoundedIds<Cpu>::checked("loader", writable, 10, "token");
  CHECK(embedding(random_param({10, 4}, 1), checked_once).shape() == Shape{2, 4});
  writable.data()[1] = 99;
  CHECK_THROWS_WITH(embedding(random_param({10, 4}, 1), checked_once),
                    Contains("embedding: token ids were written after their bound was checked"));
  auto ys = random_param({6, 4}, 2), gate = random_param({3, 2}, 3);
  const auto rows =
      BoundedIds<Cpu>::checked("router", CpuTensor<std::int32_t>::from_host({6}, {5, 4, 3, 2, 1, 0}), 7, "row");
  CHECK_THROWS_WITH(gated_combine(ys, gate, rows), Contains("gated_combine: row ids bounded by 7 index 6 rows"));
  // A kernel's outputs are trusted by its contract where NDEBUG is defined, checked where it is not
  // (the ASan preset's Debug build checks every MoE layer's routing this way).
  const auto out_of_range = CpuTensor<std::int32_t>::from_host({2}, {0, 6});
#ifdef NDEBUG
  CHECK(BoundedIds<Cpu>::by_contract(out_of_range, 6, "row_of_slot").bound() == 6);
#else
  CHECK_THROWS_WITH(BoundedIds<Cpu>::by_contract(out_of_range, 6, "row_of_slot"),
                    Contains("row_of_slot id 6 >= 6"));
#endif
}

TEST_CASE("gated_combine: row_of_slot sizes, ranges and repeats name the entry", "[errors]") {
  auto ys = random_param({6, 4}, 1), gate = random_param({3, 2}, 2);
  CHECK_NOTHROW(gated_combine(ys, gate, std::vector<std::int32_t>{5, 4, 3, 2, 1, 0}));
  CHECK_THROWS_WITH(gated_combine(ys, gate, std::vector<std::int32_t>{0, 1, 2, 3, 4}),
                    Contains("row_of_slot has 5 entries, expected tokens * k = 6"));
  CHECK_THROWS_WITH(gated_combine(ys, gate, std::vector<std::int32_t>{0, 1, 2, 2, 4, 5}),
                    Contains("row_of_slot[3] = 2 is out of range or repeated"));
  CHECK_THROWS_WITH(gated_combine(ys, gate, std::vector<std::int32_t>{0, 1, 2, 3, 4, 6}),
                    Contains("row_of_slot[5] = 6 is out of range or repeated"));
  // In backend memory (as the expert routing writes it): the range is checked.
  CHECK_THROWS_WITH(gated_combine(ys, gate, CpuTensor<std::int32_t>::from_host({6}, {0, 1, 2, 3, 4, 6})),
                    Contains("gated_combine: row id 6 >= 6"));
  CHECK_THROWS_WITH(gated_combine(ys, gate, CpuTensor<std::int32_t>::from_host({6}, {0, -1, 2, 3, 4, 5})),
                    Contains("gated_combine: row id -1 is negative"));
  CHECK_THROWS_WITH(gated_combine(random_param({5, 4}, 3), gate, CpuTensor<std::int32_t>::from_host({6}, {0, 1, 2, 3, 4, 5})),
                    Contains("ys has 5 rows, gate (3, 2) needs tokens * k = 6"));
}

TEST_CASE("empty tensors where an op needs elements", "[errors]") {
  V64 empty(T64(Shape{0, 4}));
  CHECK_THROWS_WITH(mean(empty), Contains("mean: mean of an empty tensor (shape (0, 4))"));
  CHECK_THROWS_WITH(mean(empty, 0), Contains("mean over an empty axis 0"));
  CHECK_THROWS_WITH((rmsnorm(V64(T64(Shape{3, 0})))), Contains("rmsnorm: needs a non-empty last dim, got shape (3, 0)"));
  const auto no_targets = CpuTensor<std::int32_t>(Shape{0});
  CHECK_THROWS_WITH(cross_entropy(empty, no_targets), Contains("cross_entropy: empty batch"));
}

TEST_CASE("cross-entropy: all-masked batch, bad targets, mismatched mask", "[errors]") {
  auto logits = random_param({3, 5}, 1);
  const auto targets = CpuTensor<std::int32_t>::from_host({3}, {0, 1, 2});
  const auto all_masked = CpuTensor<double>::zeros({3});
  CHECK_THROWS_AS(cross_entropy(logits, targets, all_masked), Error);
  CHECK_THROWS_WITH(cross_entropy(logits, targets, all_masked), Contains("every token is masked (loss_mask sums to 0 over 3 tokens)"));
  CHECK_THROWS_WITH((cross_entropy(logits, CpuTensor<std::int32_t>::from_host({3}, {0, 5, 1}))), Contains("target id 5 >= 5"));
  CHECK_THROWS_WITH((cross_entropy(logits, CpuTensor<std::int32_t>::from_host({2}, {0, 1}))), Contains("targets (2) do not match logits (3, 5)"));
  CHECK_THROWS_WITH((cross_entropy(logits, targets, CpuTensor<double>::zeros({4}))), Contains("loss_mask (4) does not match targets (3)"));
}

TEST_CASE("RoPE: odd head_dim and position count mismatches", "[errors]") {
  const auto positions = CpuTensor<std::int32_t>::from_host({2}, {0, 1});
  CHECK_THROWS_WITH((rope(random_param({2, 1, 5}, 1), positions)), Contains("head_dim must be even"));
  CHECK_THROWS_WITH((rope(random_param({3, 1, 4}, 2), positions)), Contains("do not give one position per token"));
  CHECK_THROWS_WITH((rope(random_param({2, 1, 4}, 3), positions, -1.0)), Contains("theta must be positive"));
}

TEST_CASE("backward misuse", "[errors]") {
  auto x = random_param({3}, 1);
  CHECK_THROWS_WITH(backward(scale(x, 2.0)), Contains("loss must have one element, got shape (3)"));
  CHECK_THROWS_WITH(backward(V64(T64::scalar(1.0))), Contains("does not require a gradient"));
  CHECK_THROWS_WITH(softcap(x, 0.0), Contains("softcap: cap must be positive, got 0"));
}
