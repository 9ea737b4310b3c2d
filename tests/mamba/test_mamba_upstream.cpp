// Parity with the reference Mamba3 module (state-spaces/mamba mamba_ssm/modules/mamba3.py): a
// synthetic tensor set in the reference's names and layouts is written as safetensors, loaded with
// load_upstream_mamba3, and the layer must give the outputs of an independent per-token
// implementation of the reference's formulas that reads the reference's tensors as they are: the
// heavy-tail (or softplus) A, is_outproj_norm, and the rotary pairing (i, i + N/2) of the MIMO
// kernels ((2i, 2i+1) for SISO). Without the loader's renumbering the MIMO layer must disagree.
#include "data/temp_dir.hpp"
#include "support/documents_testing.hpp"
#include "support/op_testing.hpp"

#include <cmath>
#include <map>
#include <numbers>

#include "megacpp/io/safetensors.hpp"
#include "megacpp/nn/mamba.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {

// One reference module's tensors: name -> (shape, row-major values).
using TensorSet = std::map<std::string, std::pair<Shape, std::vector<double>>>;

struct RefConfig {
  index_t d_model = 4, d_inner = 8, headdim = 4, d_state = 8, rank = 1;
  double rope_fraction = 0.5;
  bool outproj_norm = false, heavy_tail = true;
  index_t heads() const { return d_inner / headdim; }
  index_t angles() const { return static_cast<index_t>(static_cast<double>(d_state) * rope_fraction) / 2; }
  index_t d_in_proj() const { return 2 * d_inner + 2 * rank * d_state + 3 * heads() + angles(); }
};

std::vector<double> draw(Rng& rng, index_t n, double lo, double hi) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Random weights with the reference's names and shapes (values away from the initial ones, so a
// tensor that lands in the wrong place changes the output).
TensorSet reference_tensors(const RefConfig& c, std::uint64_t seed) {
  Rng rng(seed);
  const index_t H = c.heads(), R = c.rank, N = c.d_state, P = c.headdim;
  TensorSet t;
  t["in_proj.weight"] = {{c.d_in_proj(), c.d_model}, draw(rng, c.d_in_proj() * c.d_model, -0.8, 0.8)};
  t["dt_bias"] = {{H}, draw(rng, H, -3.0, -1.0)};
  t["B_bias"] = {{H, R, N}, draw(rng, H * R * N, 0.5, 1.5)};
  t["C_bias"] = {{H, R, N}, draw(rng, H * R * N, 0.5, 1.5)};
  t["B_norm.weight"] = {{N}, draw(rng, N, 0.5, 1.5)};
  t["C_norm.weight"] = {{N}, draw(rng, N, 0.5, 1.5)};
  t["D"] = {{H}, draw(rng, H, 0.5, 1.5)};
  if (R > 1)
    for (const char* n : {"mimo_x", "mimo_z", "mimo_o"}) t[n] = {{H, R, P}, draw(rng, H * R * P, 0.2, 1.2)};
  if (c.outproj_norm) t["norm.weight"] = {{c.d_inner}, draw(rng, c.d_inner, 0.5, 1.5)};
  t["out_proj.weight"] = {{c.d_model, c.d_inner}, draw(rng, c.d_model * c.d_inner, -0.5, 0.5)};
  return t;
}

void write_tensors(const TensorSet& t, const std::filesystem::path& path, const std::string& prefix = "") {
  io::SafetensorsWriter w;
  for (const auto& [name, v] : t) w.add(prefix + name, Tensor<double, Cpu>::from_host(v.first, v.second));
  w.write(path);
}

double silu(double x) { return x / (1 + std::exp(-x)); }

// The reference module's forward on one document u (T, d_model), token by token, straight from
// mamba3.py's formulas and the reference's tensors (no renumbering).
std::vector<double> reference_forward(const RefConfig& c, const TensorSet& t, const std::vector<double>& u, index_t T) {
  const index_t dm = c.d_model, di = c.d_inner, H = c.heads(), R = c.rank, N = c.d_state, P = c.headdim, S = c.angles();
  const auto& w = t.at("in_proj.weight").second;
  const auto at = [&](const char* n) -> const std::vector<double>& { return t.at(n).second; };
  const double eps = 1e-5, A_floor = 1e-4;
  std::vector<double> theta(static_cast<std::size_t>(H * S), 0.0), state(static_cast<std::size_t>(H * P * N), 0.0),
      k_prev(static_cast<std::size_t>(H * R * N), 0.0), v_prev(static_cast<std::size_t>(H * R * P), 0.0), out;
  for (index_t tok = 0; tok < T; ++tok) {
    std::vector<double> proj(static_cast<std::size_t>(c.d_in_proj()), 0.0);
    for (index_t o = 0; o < c.d_in_proj(); ++o)
      for (index_t i = 0; i < dm; ++i) proj[o] += w[o * dm + i] * u[tok * dm + i];
    const double* z = proj.data();
    const double* x = z + di;
    const double* Bp = x + di;
    const double* Cp = Bp + R * N;
    const double* dd_dt = Cp + R * N;
    const double* dd_A = dd_dt + H;
    const double* trap = dd_A + H;
    const double* angle = trap + H;
    // B_norm / C_norm: RMSNorm over N of each rank's row, times the gain
    auto rms = [&](const double* v, const std::vector<double>& gain, index_t r) {
      double ms = 0;
      for (index_t n = 0; n < N; ++n) ms += v[r * N + n] * v[r * N + n] / static_cast<double>(N);
      std::vector<double> o(static_cast<std::size_t>(N));
      for (index_t n = 0; n < N; ++n) o[n] = v[r * N + n] / std::sqrt(ms + eps) * gain[n];
      return o;
    };
    std::vector<double> g(static_cast<std::size_t>(di), 0.0);
    for (index_t h = 0; h < H; ++h) {
      const double dt = std::log1p(std::exp(dd_dt[h] + at("dt_bias")[h]));
      const double a = dd_A[h];
      const double phi = c.heavy_tail ? (a >= 0 ? 1 + a : 1 / (1 - a)) : std::log1p(std::exp(a));
      const double A = std::min(-phi, -A_floor), alpha = std::exp(A * dt), lam = 1 / (1 + std::exp(-trap[h]));
      const double beta = (1 - lam) * dt * alpha, gamma = lam * dt;
      for (index_t s = 0; s < S; ++s) theta[h * S + s] += std::numbers::pi * std::tanh(angle[s]) * dt;
      std::vector<double> q(static_cast<std::size_t>(R * N)), k(q.size()), v(static_cast<std::size_t>(R * P));
      for (index_t r = 0; r < R; ++r) {
        const auto Bn = rms(Bp, at("B_norm.weight"), r), Cn = rms(Cp, at("C_norm.weight"), r);
        for (index_t n = 0; n < N; ++n) {
          k[r * N + n] = Bn[n] + at("B_bias")[(h * R + r) * N + n];
          q[r * N + n] = Cn[n] + at("C_bias")[(h * R + r) * N + n];
        }
        for (index_t s = 0; s < S; ++s) {  // MIMO: (s, s + N/2); SISO: (2s, 2s + 1)
          const index_t i0 = R > 1 ? s : 2 * s, i1 = R > 1 ? s + N / 2 : 2 * s + 1;
          const double cs = std::cos(theta[h * S + s]), sn = std::sin(theta[h * S + s]);
          for (double* vec : {q.data() + r * N, k.data() + r * N}) {
            const double v0 = vec[i0], v1 = vec[i1];
            vec[i0] = v0 * cs - v1 * sn;
            vec[i1] = v0 * sn + v1 * cs;
          }
        }
        for (index_t p = 0; p < P; ++p) v[r * P + p] = x[h * P + p] * (R > 1 ? at("mimo_x")[(h * R + r) * P + p] : 1.0);
      }
      double* st = state.data() + h * P * N;
      for (index_t p = 0; p < P; ++p)
        for (index_t n = 0; n < N; ++n) {
          double upd = 0;
          for (index_t r = 0; r < R; ++r)
            upd += beta * v_prev[(h * R + r) * P + p] * k_prev[(h * R + r) * N + n] + gamma * v[r * P + p] * k[r * N + n];
          st[p * N + n] = alpha * st[p * N + n] + upd;
        }
      for (index_t r = 0; r < R; ++r) {
        std::vector<double> y(static_cast<std::size_t>(P));
        for (index_t p = 0; p < P; ++p) {
          y[p] = at("D")[h] * v[r * P + p];
          for (index_t n = 0; n < N; ++n) y[p] += st[p * N + n] * q[r * N + n];
        }
        if (c.outproj_norm) {  // RMSNormGated(d_inner, group_size=headdim, norm_before_gate=True)
          double ms = 0;
          for (double yp : y) ms += yp * yp / static_cast<double>(P);
          for (index_t p = 0; p < P; ++p) y[p] = y[p] / std::sqrt(ms + eps) * at("norm.weight")[h * P + p];
        }
        for (index_t p = 0; p < P; ++p) {
          const double zr = z[h * P + p] * (R > 1 ? at("mimo_z")[(h * R + r) * P + p] : 1.0);
          g[h * P + p] += (R > 1 ? at("mimo_o")[(h * R + r) * P + p] : 1.0) * y[p] * silu(zr);
        }
      }
      std::copy(k.begin(), k.end(), k_prev.begin() + h * R * N);
      std::copy(v.begin(), v.end(), v_prev.begin() + h * R * P);
    }
    const auto& wo = at("out_proj.weight");
    for (index_t o = 0; o < dm; ++o) {
      double acc = 0;
      for (index_t i = 0; i < di; ++i) acc += wo[o * di + i] * g[i];
      out.push_back(acc);
    }
  }
  return out;
}

Mamba3Config layer_config(const RefConfig& c) {
  Mamba3Config m;
  m.d_model = c.d_model;
  m.expand = c.d_inner / c.d_model;
  m.headdim = c.headdim;
  m.d_state = c.d_state;
  m.rope_fraction = c.rope_fraction;
  m.is_outproj_norm = c.outproj_norm;
  m.chunk_size = 3;
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Loads the reference tensors of `c` into a fresh Layer and compares the chunked and sequential
// forwards of one 11-token document with the reference; returns the larger largest difference.
template <class Layer>
double loaded_vs_reference(const RefConfig& c, std::uint64_t seed) {
  TempDir dir;
  const TensorSet t = reference_tensors(c, seed);
  write_tensors(t, dir / "mixer.safetensors", "backbone.layers.3.mixer.");
  Rng rng(seed + 1);
  Layer layer(layer_config(c), rng);
  load_upstream_mamba3(layer, io::SafetensorsReader(dir / "mixer.safetensors"), "backbone.layers.3.mixer.");
  const index_t T = 11;
  Rng urng(seed + 2);
  const std::vector<double> u = draw(urng, T * c.d_model, -1.0, 1.0);
  const std::vector<double> want = reference_forward(c, t, u, T);
  NoGrad no_grad;
  const auto docs = packed_layout({{T}}, 0);
  const V64 uv(T64::from_host({1, T, c.d_model}, u));
  const double chunked = max_abs_diff(layer.forward(uv, docs).value().to_host(), want);
  layer.config.scan = ScanKind::sequential;
  const double sequential = max_abs_diff(layer.forward(uv, docs).value().to_host(), want);
  INFO("chunked " << chunked << ", sequential " << sequential);
  return std::max(chunked, sequential);
}

}  // namespace

TEST_CASE("upstream_mimo_state_order: megacpp's pair (2i, 2i+1) is the reference's (i, i + N/2)", "[mamba][upstream]") {
  CHECK(upstream_mimo_state_order(8, 2) == std::vector<index_t>{0, 4, 1, 5, 2, 3, 6, 7});
  CHECK(upstream_mimo_state_order(8, 4) == std::vector<index_t>{0, 4, 1, 5, 2, 6, 3, 7});
  CHECK(upstream_mimo_state_order(6, 1) == std::vector<index_t>{0, 3, 1, 2, 4, 5});
  CHECK_THROWS_WITH(upstream_mimo_state_order(7, 2), Contains("even d_state and at most d_state / 2 angles, got d_state 7 and 2"));
}

TEST_CASE("load_upstream_mamba3: a reference tensor set loads and computes the reference's outputs", "[mamba][upstream]") {
  RefConfig c;
  SECTION("SISO, heavy-tail A") { CHECK(loaded_vs_reference<Mamba3<double, Cpu, SISO>>(c, 1) < 1e-10); }
  SECTION("SISO, softplus A, is_outproj_norm") {
    c.heavy_tail = false;
    c.outproj_norm = true;
    CHECK(loaded_vs_reference<Mamba3<double, Cpu, SISO, SoftplusA>>(c, 2) < 1e-10);
  }
  SECTION("MIMO<2>, heavy-tail A, rotary pairs (i, i + N/2) with pass-through channels") {
    c.rank = 2;
    CHECK(loaded_vs_reference<Mamba3<double, Cpu, MIMO<2>>>(c, 3) < 1e-10);
  }
  SECTION("MIMO<2>, is_outproj_norm, rope_fraction 1 (every channel rotates)") {
    c.rank = 2;
    c.outproj_norm = true;
    c.rope_fraction = 1.0;
    CHECK(loaded_vs_reference<Mamba3<double, Cpu, MIMO<2>>>(c, 4) < 1e-10);
  }
  SECTION("the test can fail: the wrong A activation disagrees") {
    CHECK(loaded_vs_reference<Mamba3<double, Cpu, SISO, SoftplusA>>(c, 5) > 1e-4);
  }
}

TEST_CASE("load_upstream_mamba3: MIMO weights copied without the renumbering give other outputs", "[mamba][upstream]") {
  RefConfig c;
  c.rank = 2;
  const TensorSet t = reference_tensors(c, 6);
  Rng rng(7);
  Mamba3<double, Cpu, MIMO<2>> layer(layer_config(c), rng);
  // the reference's tensors assigned as they are (the upstream and megacpp names differ only in ".weight")
  layer.for_each_param([&](const std::string& name, Param<double, Cpu>& p) {
    const bool plain = t.count(name) != 0;
    const auto& v = plain ? t.at(name) : t.at(name + ".weight");
    p.var.mutable_value().assign(T64::from_host(v.first, v.second));
  });
  const index_t T = 11;
  Rng urng(8);
  const std::vector<double> u = draw(urng, T * c.d_model, -1.0, 1.0);
  NoGrad no_grad;
  const auto y = layer.forward(V64(T64::from_host({1, T, c.d_model}, u)), packed_layout({{T}}, 0)).value().to_host();
  CHECK(max_abs_diff(y, reference_forward(c, t, u, T)) > 1e-4);
}

TEST_CASE("load_upstream_mamba3: a file that does not fit the layer is refused with the tensor's name", "[mamba][upstream]") {
  TempDir dir;
  RefConfig c;
  c.rank = 2;
  c.outproj_norm = true;
  write_tensors(reference_tensors(c, 9), dir / "mimo_norm.safetensors");
  const io::SafetensorsReader mimo_norm(dir / "mimo_norm.safetensors");
  Rng rng(10);
  RefConfig siso_cfg;
  Mamba3<double, Cpu, SISO> siso(layer_config(siso_cfg), rng);
  const auto before = siso.in_proj.weight.value().to_host();
  CHECK_THROWS_WITH(load_upstream_mamba3(siso, mimo_norm), Contains("holds \"mimo_x\" but this layer is SISO"));
  Mamba3<double, Cpu, MIMO<2>> mimo(layer_config(siso_cfg), rng);  // no is_outproj_norm
  CHECK_THROWS_WITH(load_upstream_mamba3(mimo, mimo_norm),
                    Contains("holds \"norm.weight\" but this layer has no out_proj norm"));
  Mamba3<double, Cpu, MIMO<4>> rank4(layer_config(c), rng);
  CHECK_THROWS_WITH(load_upstream_mamba3(rank4, mimo_norm), Contains("tensor \"in_proj.weight\" has shape (56, 4), expected (88, 4)"));
  // a missing tensor is named, and nothing changed before it was found missing
  RefConfig plain;
  TensorSet t = reference_tensors(plain, 11);
  t.erase("D");
  write_tensors(t, dir / "no_d.safetensors");
  CHECK_THROWS_WITH(load_upstream_mamba3(siso, io::SafetensorsReader(dir / "no_d.safetensors")), Contains("no tensor named \"D\""));
  CHECK(siso.in_proj.weight.value().to_host() == before);
}

TEST_CASE("load_upstream_mamba3: a bf16 release loads into an fp32 layer by value", "[mamba][upstream]") {
  TempDir dir;
  RefConfig c;
  const TensorSet t = reference_tensors(c, 12);
  io::SafetensorsWriter w;  // the reference publishes bf16 weights
  for (const auto& [name, v] : t) w.add(name, Tensor<double, Cpu>::from_host(v.first, v.second).to<bf16>());
  w.write(dir / "bf16.safetensors");
  Rng rng(13);
  Mamba3<float, Cpu, SISO> layer(layer_config(c), rng);
  load_upstream_mamba3(layer, io::SafetensorsReader(dir / "bf16.safetensors"));
  const auto& in = t.at("in_proj.weight");
  const auto want = Tensor<double, Cpu>::from_host(in.first, in.second).to<bf16>().to<float>().to_host();
  CHECK(layer.in_proj.weight.value().to_host() == want);  // SISO: no renumbering, so element for element
}
