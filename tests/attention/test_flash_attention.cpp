// The fused attention op: tiling properties, agreement with the dense reference and with finite
// differences, document-masking invariants (bitwise), schedules and thread counts, tile skipping.
#include "attention_testing.hpp"

#include <omp.h>

#include <limits>
#include <set>
#include <utility>

using namespace megacpp;
using namespace megacpp::testing;
using Backward = AttentionBackwardSchedule;

TEST_CASE("tiling: every visible pair is computed exactly once, no computed tile is fully masked",
          "[attention][tiling]") {
  Rng rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const index_t len = 1 + static_cast<index_t>(rng.below(40));
    const index_t tq = 1 + static_cast<index_t>(rng.below(9)), tk = 1 + static_cast<index_t>(rng.below(9));
    const index_t window = rng.below(3) == 0 ? 0 : 1 + static_cast<index_t>(rng.below(12));
    INFO("len " << len << ", tile_q " << tq << ", tile_k " << tk << ", window " << window);
    std::vector<int> cover(static_cast<std::size_t>(len * len), 0);
    std::set<std::pair<index_t, index_t>> from_queries, from_keys;
    bool any_trimmed_visible = false;
    for (index_t qt = 0; qt < attention::tile_count(len, tq); ++qt) {
      const index_t qs = qt * tq, qe = std::min(qs + tq, len);
      const attention::TileRange kr = attention::key_tiles_for_queries(qs, qe, tk, window);
      for (index_t kt = kr.first; kt < kr.last; ++kt) {
        from_queries.insert({qt, kt});
        const index_t ks = kt * tk, ke = std::min(ks + tk, len);
        const attention::TileRange computed = attention::computed_keys(qs, qe, ks, ke, window);
        REQUIRE((ks <= computed.first && computed.first < computed.last && computed.last <= ke));
        bool any = false, all = true;
        for (index_t i = qs; i < qe; ++i) {
          for (index_t j = ks; j < ke; ++j) {
            const bool vis = attention::visible(i, j, window);
            all = all && vis;
            if (j < computed.first || j >= computed.last) {
              any_trimmed_visible = any_trimmed_visible || vis;  // trimming drops only invisible keys
              continue;
            }
            ++cover[static_cast<std::size_t>(i * len + j)];
            any = any || vis;
          }
        }
        REQUIRE(any);  // a computed tile always holds a visible pair
        REQUIRE(attention::tile_is_full(qs, qe, ks, ke, window) == all);
      }
    }
    for (index_t kt = 0; kt < attention::tile_count(len, tk); ++kt) {
      const index_t ks = kt * tk, ke = std::min(ks + tk, len);
      const attention::TileRange qr = attention::query_tiles_for_keys(ks, ke, len, tq, window);
      for (index_t qt = qr.first; qt < qr.last; ++qt) from_keys.insert({qt, kt});
    }
    REQUIRE(from_queries == from_keys);  // forward (by query tile) and backward (by key tile) agree
    REQUIRE_FALSE(any_trimmed_visible);
    index_t visible_pairs_not_covered_once = 0;
    for (index_t i = 0; i < len; ++i)
      for (index_t j = 0; j < len; ++j)
        visible_pairs_not_covered_once += attention::visible(i, j, window) && cover[static_cast<std::size_t>(i * len + j)] != 1;
    REQUIRE(visible_pairs_not_covered_once == 0);
  }
}

TEST_CASE("flash_attention: gradcheck and the dense reference (double), GQA, softcap, window, packed rows",
          "[attention][gradcheck]") {
  // kTinyTiles: query tiles of 2 tokens x 2 heads, key tiles of 3: many partial tiles
  // Row 0 starts mid-document (3 tokens before its first BOS), then documents of 5, 1, 1 and 4
  // tokens. Row 1: documents of 1, 7 and 6 tokens (finite differences run on row 0 only).
  const auto docs = layout_of({{-3, 5, 1, 1, 4}, {1, 7, 6}});
  const auto row0 = layout_of({{-3, 5, 1, 1, 4}});
  const index_t B = 2, T = 14, H = 4, Hkv = 2, D = 2;
  struct Case {
    const char* name;
    AttentionOptions options;
    bool gradcheck;  // finite differences as well as the dense reference
  };
  const Case cases[] = {{"causal, no softcap", {0.0, 0.0, 0, kTinyTiles}, true},
                        {"softcap 2, window 3, scale 0.7", {0.7, 2.0, 3, kTinyTiles}, true},
                        {"softcap 50, window 1 (self only)", {0.0, 50.0, 1, kTinyTiles}, false}};
  for (const Case& c : cases) {
    INFO(c.name);
    auto q = random_var<double>({B, T, H, D}, 1), k = random_var<double>({B, T, Hkv, D}, 2),
         v = random_var<double>({B, T, Hkv, D}, 3);
    if (c.gradcheck) {
      auto q0 = random_var<double>({1, T, H, D}, 1), k0 = random_var<double>({1, T, Hkv, D}, 2),
           v0 = random_var<double>({1, T, Hkv, D}, 3);
      require_gradcheck(c.name, [&](auto& in) { return flash_attention(in[0], in[1], in[2], row0, c.options); }, {q0, k0, v0});
    }

    const auto upstream = random_tensor<double>({B, T, H, D}, 4);
    auto fused = flash_attention(q, k, v, docs, c.options);
    auto dense = dense_attention(q, k, v, docs, c.options);
    CHECK(max_relative_error(fused.value(), dense.value()) < 1e-12);
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    backward(fused, upstream);
    const auto gq = q.grad().clone(), gk = k.grad().clone(), gv = v.grad().clone();
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    backward(dense, upstream);
    if (c.options.window == 1) {
      // Each query sees only itself, so the output is v whatever q and k: their gradients are
      // exactly zero in exact arithmetic, and what either path returns is the rounding of
      // dS = P (dP - D) with dP = dO . v and D = dO . O summed in different orders (FMA or not,
      // depending on the build). A relative error against a zero reference measures nothing;
      // the bound is absolute, a few ulps of the O(1) terms that cancel.
      CHECK(max_abs(gq) < 1e-14);
      CHECK(max_abs(gk) < 1e-14);
      CHECK(max_abs(q.grad()) < 1e-14);
      CHECK(max_abs(k.grad()) < 1e-14);
    } else {
      CHECK(max_relative_error(gq, q.grad()) < 1e-12);
      CHECK(max_relative_error(gk, k.grad()) < 1e-12);
    }
    CHECK(max_relative_error(gv, v.grad()) < 1e-12);
  }
}

TEST_CASE("GQA: query head h reads kv head h / (heads / kv_heads)", "[attention]") {
  const auto docs = layout_of({{5, 4}});
  const index_t T = 9, H = 6, Hkv = 2, D = 4, group = H / Hkv;
  auto q = random_var<double>({1, T, H, D}, 30, false), k = random_var<double>({1, T, Hkv, D}, 31, false),
       v = random_var<double>({1, T, Hkv, D}, 32, false);
  const auto all_heads = flash_attention(q, k, v, docs, {0.0, 50.0, 0});
  for (index_t h = 0; h < H; ++h) {
    INFO("query head " << h);
    const index_t kvh = h / group;
    const auto one_head = flash_attention(slice(q, 2, h, h + 1), slice(k, 2, kvh, kvh + 1), slice(v, 2, kvh, kvh + 1), docs,
                                          {0.0, 50.0, 0});
    CHECK(max_relative_error(slice(all_heads, 2, h, h + 1).value(), one_head.value()) < 1e-14);
  }
}

TEST_CASE("flash_attention (float, real tile sizes) matches the dense reference", "[attention]") {
  // Default tiles, a document longer than a query tile and than a key tile.
  REQUIRE(300 > kDefaultTiles.tile_k);
  const auto docs = layout_of({{-20, 1, 300, 29}});
  const index_t T = 350, H = 2, Hkv = 1, D = 16;
  for (const AttentionOptions opt : {AttentionOptions{0.0, 50.0, 0}, AttentionOptions{0.0, 50.0, 70}}) {
    INFO("window " << opt.window);
    auto q = random_var<float>({1, T, H, D}, 5), k = random_var<float>({1, T, Hkv, D}, 6), v = random_var<float>({1, T, Hkv, D}, 7);
    const auto upstream = random_tensor<float>({1, T, H, D}, 8);
    auto fused = flash_attention(q, k, v, docs, opt);
    auto dense = dense_attention(q, k, v, docs, opt);
    CHECK(max_relative_error(fused.value(), dense.value()) < 2e-6);
    backward(fused, upstream);
    const auto gq = q.grad().clone(), gk = k.grad().clone(), gv = v.grad().clone();
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    backward(dense, upstream);
    CHECK(max_relative_error(gq, q.grad()) < 1e-5);
    CHECK(max_relative_error(gk, k.grad()) < 1e-5);
    CHECK(max_relative_error(gv, v.grad()) < 1e-5);
  }
}

TEST_CASE("masking invariants: scores across documents are -inf and probabilities exactly 0", "[attention][masking]") {
  const auto docs = layout_of({{3, 3, 2}, {-2, 4, 1, 1}});
  const index_t B = 2, T = 8, H = 2, Hkv = 1, D = 4;
  auto q = random_var<double>({B, T, H, D}, 9), k = random_var<double>({B, T, Hkv, D}, 10), v = random_var<double>({B, T, Hkv, D}, 11);
  DenseAttentionScores<double, Cpu> scores;
  const auto out = dense_attention(q, k, v, docs, {0.0, 50.0, 0}, &scores);
  const double* s = scores.scores.data();
  const double* p = scores.probabilities.data();
  int cross = 0;
  for (index_t b = 0; b < B; ++b) {
    for (index_t h = 0; h < H; ++h) {
      for (index_t i = 0; i < T; ++i) {
        for (index_t j = 0; j < T; ++j) {
          const index_t e = ((b * H + h) * T + i) * T + j;
          if (!docs.same_document(b, i, j) || j > i) {
            cross += !docs.same_document(b, i, j);
            REQUIRE(s[e] == -std::numeric_limits<double>::infinity());
            REQUIRE(p[e] == 0.0);  // exactly, not approximately
          } else {
            REQUIRE(std::isfinite(s[e]));
            REQUIRE(p[e] > 0.0);
          }
        }
      }
    }
  }
  CHECK(cross > 0);
  // The fused op agrees with the materialised path on these documents.
  CHECK(max_relative_error(flash_attention(q, k, v, docs, {0.0, 50.0, 0}).value(), out.value()) < 1e-12);
}

TEST_CASE("masking invariants: pack [A A A][B B B]: B's outputs and gradients are bitwise B alone, A cannot reach B",
          "[attention][masking]") {
  // k and v are read in place: with 3 kv heads of 6 floats a token's row is 72 bytes, so B's rows
  // sit at other alignments in the pack than alone (the kernel must not care).
  const index_t H = 6, Hkv = 3, D = 6;
  struct Setup {
    index_t q_rows, tile_k;  // kernel tiles
    index_t len_a, len_b;    // document lengths
    index_t window;
  };
  // Default tiles (B shorter and longer than a query tile and a key tile) and tiny tiles (2 tokens
  // x 2 heads by 3 keys: many partial tiles); with and without a window.
  const index_t q_rows = kDefaultTiles.q_rows, tile_k = kDefaultTiles.tile_k;
  REQUIRE(300 > tile_k);
  const Setup setups[] = {{q_rows, tile_k, 3, 3, 0}, {q_rows, tile_k, 37, 300, 0}, {q_rows, tile_k, 37, 300, 20},
                          {4, 3, 3, 3, 0},      {4, 3, 7, 13, 0},       {4, 3, 7, 13, 5}};
  for (const Setup& setup : setups) {
    const index_t len_a = setup.len_a, len_b = setup.len_b, T = len_a + len_b;
    const AttentionOptions opt{0.0, 50.0, setup.window, {setup.q_rows, setup.tile_k}};
    INFO("tiles (" << setup.q_rows << ", " << setup.tile_k << "), A " << len_a << " B " << len_b << " tokens, window "
                   << opt.window);
    const auto packed = layout_of({{len_a, len_b}});
    const auto alone = layout_of({{len_b}});
    auto q = random_var<float>({1, T, H, D}, 12), k = random_var<float>({1, T, Hkv, D}, 13), v = random_var<float>({1, T, Hkv, D}, 14);
    const auto upstream = random_tensor<float>({1, T, H, D}, 15);
    auto o = flash_attention(q, k, v, packed, opt);
    backward(o, upstream);

    auto qb = Var<float, Cpu>(seq_rows(q.value(), len_a, T), true), kb = Var<float, Cpu>(seq_rows(k.value(), len_a, T), true),
         vb = Var<float, Cpu>(seq_rows(v.value(), len_a, T), true);
    auto ob = flash_attention(qb, kb, vb, alone, opt);
    backward(ob, seq_rows(upstream, len_a, T));
    REQUIRE(bitwise_equal(seq_rows(o.value(), len_a, T), ob.value()));
    REQUIRE(bitwise_equal(seq_rows(q.grad(), len_a, T), qb.grad()));
    REQUIRE(bitwise_equal(seq_rows(k.grad(), len_a, T), kb.grad()));
    REQUIRE(bitwise_equal(seq_rows(v.grad(), len_a, T), vb.grad()));

    // Change every q, k, v of A: B's outputs do not change by a single bit.
    auto q2 = Var<float, Cpu>(q.value().clone(), true), k2 = Var<float, Cpu>(k.value().clone(), true),
         v2 = Var<float, Cpu>(v.value().clone(), true);
    for (auto* x : {&q2, &k2, &v2}) {
      const index_t per_token = x->numel() / T;
      for (index_t i = 0; i < len_a * per_token; ++i) x->mutable_value().data()[i] = 3.0f * x->value().data()[i] + 1.0f;
    }
    auto o2 = flash_attention(q2, k2, v2, packed, opt);
    REQUIRE(bitwise_equal(seq_rows(o2.value(), len_a, T), seq_rows(o.value(), len_a, T)));
    // A loss on B's outputs only: its gradient with respect to A's q, k, v is exactly zero.
    Tensor<float, Cpu> b_only = upstream.clone();
    std::fill(b_only.data(), b_only.data() + len_a * H * D, 0.0f);
    backward(o2, b_only);
    for (const auto* x : {&q2, &k2, &v2}) {
      const index_t per_token = x->numel() / T;
      REQUIRE(count_nonzero(x->grad().data(), 0, len_a * per_token) == 0);
    }
  }
}

TEST_CASE("flash_attention: padding tokens (in no document) give output 0, gradient 0, no NaN, dense agrees", "[attention][masking]") {
  // Row 0: documents of 4 and 3 tokens, then tokens 7, 8 are padding; row 1: tokens 0..2 are
  // padding, then one document of 6 tokens.
  const auto docs = DocumentLayout<Cpu>::from_spans(2, 9, {{{0, 4}, {4, 3}}, {{3, 6}}});
  const index_t B = 2, T = 9, H = 2, Hkv = 1, D = 4;
  auto q = random_var<double>({B, T, H, D}, 16), k = random_var<double>({B, T, Hkv, D}, 17), v = random_var<double>({B, T, Hkv, D}, 18);
  auto fused = flash_attention(q, k, v, docs, {0.0, 50.0, 0, kTinyTiles});
  auto dense = dense_attention(q, k, v, docs, {0.0, 50.0, 0});
  index_t not_finite = 0;
  for (index_t i = 0; i < fused.numel(); ++i) not_finite += !std::isfinite(fused.value().data()[i]);
  REQUIRE(not_finite == 0);
  CHECK(max_relative_error(fused.value(), dense.value()) < 1e-12);
  // Padding: row 0 tokens 7, 8 and row 1 tokens 0..2.
  const std::pair<index_t, index_t> padding[] = {{7, T}, {T, T + 3}};  // as (row * T + token) ranges
  for (const auto& [t0, t1] : padding) REQUIRE(count_nonzero(fused.value().data(), t0 * H * D, t1 * H * D) == 0);
  backward(fused, random_tensor<double>({B, T, H, D}, 19));
  for (const auto& [t0, t1] : padding) {
    REQUIRE(count_nonzero(q.grad().data(), t0 * H * D, t1 * H * D) == 0);
    REQUIRE(count_nonzero(k.grad().data(), t0 * Hkv * D, t1 * Hkv * D) == 0);
    REQUIRE(count_nonzero(v.grad().data(), t0 * Hkv * D, t1 * Hkv * D) == 0);
  }
  const auto gq = q.grad().clone(), gk = k.grad().clone(), gv = v.grad().clone();
  q.zero_grad(), k.zero_grad(), v.zero_grad();
  backward(dense, random_tensor<double>({B, T, H, D}, 19));
  CHECK(max_relative_error(gq, q.grad()) < 1e-12);
  CHECK(max_relative_error(gk, k.grad()) < 1e-12);
  CHECK(max_relative_error(gv, v.grad()) < 1e-12);
}

TEST_CASE("flash_attention: one-pass and two-pass backward agree bitwise, results do not depend on the thread count",
          "[attention][determinism]") {
  struct Setup {
    std::vector<std::vector<index_t>> docs;
    index_t heads, kv_heads, dim, q_rows, tile_k, window;
  };
  // Tiny tiles; then the default tiles at head_dim 64, where tile products are large enough that
  // Eigen would split them across threads if the kernel let it.
  const Setup setups[] = {{{{17, 1, 22}, {-5, 35}}, 4, 1, 8, 8, 8, 9},
                          {{{150, 30}}, 8, 2, 64, kDefaultTiles.q_rows, kDefaultTiles.tile_k, 0}};
  for (const Setup& setup : setups) {
    const auto docs = layout_of(setup.docs);
    const index_t B = docs.batch, T = docs.seq, H = setup.heads, Hkv = setup.kv_heads, D = setup.dim;
    INFO("batch " << B << ", seq " << T << ", heads " << H << "/" << Hkv << ", head_dim " << D);
    auto q = random_var<float>({B, T, H, D}, 20), k = random_var<float>({B, T, Hkv, D}, 21), v = random_var<float>({B, T, Hkv, D}, 22);
    const auto upstream = random_tensor<float>({B, T, H, D}, 23);
    auto run = [&](Backward schedule, int threads) {
      const AttentionOptions opt{0.0, 50.0, setup.window, {setup.q_rows, setup.tile_k, schedule}};
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      q.zero_grad(), k.zero_grad(), v.zero_grad();
      auto o = flash_attention(q, k, v, docs, opt);
      backward(o, upstream);
      // the schedule that ran, as the kernel reports it (the op's backward keeps its statistics)
      Tensor<float, Cpu> dq = Tensor<float, Cpu>::zeros(q.shape());
      const auto p = kernels::attention_params("test", q.shape(), k.shape(), v.shape(), docs, opt);
      const float* o_data = o.value().data();
      Tensor<float, Cpu> lse(Shape{B, T, H});
      kernels::FusedAttention<Cpu>::forward<float>(p, docs, {q.value().data(), k.value().data(), v.value().data(),
                                                             dq.data(), lse.data()});
      const AttentionStats stats = kernels::FusedAttention<Cpu>::backward<float>(
          p, docs, {q.value().data(), k.value().data(), v.value().data(), o_data, lse.data(), upstream.data(),
                    dq.data(), nullptr, nullptr});
      omp_set_num_threads(saved);
      CHECK(stats.two_pass == (schedule == Backward::two_pass));
      return std::vector<Tensor<float, Cpu>>{o.value().clone(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
    };
    const auto one_pass = run(Backward::single_pass, 2);
    const auto two_pass = run(Backward::two_pass, 2);
    const auto one_thread = run(Backward::single_pass, 1);
    const auto again = run(Backward::single_pass, 2);
    for (std::size_t i = 0; i < one_pass.size(); ++i) {
      INFO("tensor " << i << " (o, dq, dk, dv)");
      REQUIRE(bitwise_equal(one_pass[i], two_pass[i]));
      REQUIRE(bitwise_equal(one_pass[i], one_thread[i]));
      REQUIRE(bitwise_equal(one_pass[i], again[i]));
    }
  }
}

TEST_CASE("flash_attention under bf16 products: the CPU has no bf16 attention kernel and stays fp32 bit for bit",
          "[attention][precision]") {
  // A Bf16Mixed model's attention asks for bf16 products (AttentionParams::products, from the
  // thread's MatmulPrecision); a backend without a bf16 attention kernel computes in T and says so.
  const auto docs = layout_of({{17, 1, 22}, {-5, 35}});
  auto q = random_var<float>({2, 40, 4, 8}, 40), k = random_var<float>({2, 40, 2, 8}, 41), v = random_var<float>({2, 40, 2, 8}, 42);
  const auto upstream = random_tensor<float>({2, 40, 4, 8}, 43);
  auto run = [&](MatmulPrecision precision) {
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    AttentionStats stats;
    Var<float, Cpu> o;
    {
      const MatmulPrecisionScope scope(precision);
      o = flash_attention(q, k, v, docs, {}, &stats);
    }
    CHECK(stats.products == MatmulPrecision::fp32);
    backward(o, upstream);
    return std::vector<Tensor<float, Cpu>>{o.value().clone(), q.grad().clone(), k.grad().clone(), v.grad().clone()};
  };
  const auto fp32 = run(MatmulPrecision::fp32);
  const auto bf16 = run(MatmulPrecision::bf16);
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    INFO("tensor " << i << " (o, dq, dk, dv)");
    REQUIRE(bitwise_equal(fp32[i], bf16[i]));
  }
}

TEST_CASE("flash_attention: tiles outside the documents are never computed, cost follows sum of squared lengths",
          "[attention][tiling]") {
  const index_t T = 1024, H = 4, Hkv = 1, D = 16;
  auto q = random_var<float>({1, T, H, D}, 24, false), k = random_var<float>({1, T, Hkv, D}, 25, false),
       v = random_var<float>({1, T, Hkv, D}, 26, false);
  // The score elements the kernel computed equal the planned per-document tiles, exactly.
  auto planned = [&](const DocumentLayout<Cpu>& docs, const AttentionStats& stats) {
    const index_t g = H / Hkv, tq = stats.q_rows / g, tk = stats.tile_k;
    long long scores = 0;
    for (const DocumentSpan& s : docs.spans[0])
      for (index_t qt = 0; qt < attention::tile_count(s.length, tq); ++qt) {
        const index_t qs = qt * tq, qe = std::min(qs + tq, s.length);
        const auto kr = attention::key_tiles_for_queries(qs, qe, tk, 0);
        for (index_t kt = kr.first; kt < kr.last; ++kt) {
          const auto keys = attention::computed_keys(qs, qe, kt * tk, std::min((kt + 1) * tk, s.length), 0);
          scores += (qe - qs) * g * (keys.last - keys.first);
        }
      }
    return scores;
  };
  const auto one_doc = layout_of({{T}});
  const auto eight_docs = layout_of({{128, 128, 128, 128, 128, 128, 128, 128}});
  AttentionStats stats;
  flash_attention(q, k, v, one_doc, {}, &stats);
  const long long one = stats.scores;
  CHECK(stats.q_rows == kDefaultTiles.q_rows);
  CHECK(stats.tile_k == kDefaultTiles.tile_k);
  CHECK(one == planned(one_doc, stats));
  flash_attention(q, k, v, eight_docs, {}, &stats);
  const long long eight = stats.scores;
  CHECK(eight == planned(eight_docs, stats));
  CHECK(eight * 5 <= one);  // 8 documents cost at most 1/5 of one (ideal 1/8)
  CHECK(one < static_cast<long long>(T) * T * H);  // tiles above the diagonal are skipped
}
