// megacpp/optim/hybrid.hpp: the Muon + AdamW split, routed by parameter Role.
//
// docs/recipe.md "Optimizers": Muon for 2-D hidden matrices; AdamW for everything
// else (embeddings, LM head, 1-D tensors, biases, RMSNorm gains, routers, scalars and every MTP
// parameter). Putting an MTP parameter under Muon is a hard error naming the parameter. Weight
// decay is a parameter-group property: by default it applies only to 2-D tensors that are not
// embeddings (so never to norms, biases, scalars, embeddings or anything not 2-D).
//
// Hybrid builds the groups from the Roles and shows the result as a table (routing_table()):
//   Muon groups   "muon"            every Role::matrix parameter
//   AdamW groups  "adamw.<role>"    one per Role, split into "adamw.<role>.decay" and
//                                   "adamw.<role>.no_decay" when a Role has both kinds
// Both routing and weight decay can be replaced by functions (HybridOptions::route, ::decays);
// per-Role AdamW hyper-parameters override the base ones (modded-nanogpt gives the embedding,
// head and scalars different Adam learning rates).
//
// ZeRO-1: shard(rank, world) shards both halves' state (adamw.hpp, muon.hpp); step(comm) then
// updates each rank's share and gathers the parameters.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "megacpp/optim/adamw.hpp"
#include "megacpp/optim/muon.hpp"

namespace megacpp::optim {

/// Which optimiser of the split updates a parameter.
enum class OptimizerKind { muon, adamw };

/// "muon" or "adamw".
constexpr std::string_view optimizer_name(OptimizerKind k) { return k == OptimizerKind::muon ? "muon" : "adamw"; }

/// The default route: Role::matrix to Muon, every other Role to AdamW.
inline OptimizerKind default_route(const std::string& /*name*/, Role role, const Shape& /*shape*/) {
  return role == Role::matrix ? OptimizerKind::muon : OptimizerKind::adamw;
}

/// The default weight-decay rule: only 2-D tensors decay, and never embeddings, norm gains,
/// biases or scalars (docs/recipe.md: "0 for non-2-D tensors, biases, embeddings").
inline bool default_decays(const std::string& /*name*/, Role role, const Shape& shape) {
  if (shape.rank() != 2) return false;
  return role != Role::embedding && role != Role::norm_gain && role != Role::bias && role != Role::scalar;
}

/// Per-Role replacements of AdamW's base hyper-parameters (unset fields keep the base value).
struct AdamWRoleOverride {
  std::optional<double> lr = std::nullopt;            ///< replaces AdamWOptions::lr
  std::optional<double> beta1 = std::nullopt;         ///< replaces AdamWOptions::beta1
  std::optional<double> beta2 = std::nullopt;         ///< replaces AdamWOptions::beta2
  std::optional<double> eps = std::nullopt;           ///< replaces AdamWOptions::eps
  std::optional<double> weight_decay = std::nullopt;  ///< replaces AdamWOptions::weight_decay where decay applies
};

/// How Hybrid splits and configures the parameters.
struct HybridOptions {
  MuonOptions muon;    ///< the Muon group; its weight_decay applies where `decays` says so
  AdamWOptions adamw;  ///< base of every AdamW group; weight_decay applies where `decays` says so
  std::map<Role, AdamWRoleOverride> adamw_by_role;  ///< per-Role replacements of `adamw`
  /// Route of each parameter (name, role, shape); empty: default_route.
  std::function<OptimizerKind(const std::string&, Role, const Shape&)> route;
  /// Whether weight decay applies to a parameter; empty: default_decays.
  std::function<bool(const std::string&, Role, const Shape&)> decays;
};

/// One row of the routing table.
struct RouteEntry {
  std::string name;                  ///< parameter name
  std::vector<std::string> aliases;  ///< other names of the same tensor (tied weights)
  Role role;                         ///< the parameter's Role
  Shape shape;                       ///< the parameter's shape
  OptimizerKind optimizer;           ///< Muon or AdamW
  std::string group;                 ///< the group that holds it
  double lr;                         ///< the group's base lr (before the schedule's scale)
  double weight_decay;               ///< the group's weight decay (0 where decay does not apply)
};

/// Muon for the matrices, AdamW for the rest, built from the parameters' Roles.
template <class T, Backend B, NsCoefficients Coefficients = NS5, MuonShapeScale ShapeScale = SqrtAspectScale>
class Hybrid {
 public:
  using value_type = T;                                  ///< element type of parameters and state
  using backend_type = B;                                ///< backend of parameters and state
  using MuonType = Muon<T, B, Coefficients, ShapeScale>;  ///< the Muon half
  using AdamWType = AdamW<T, B>;                          ///< the AdamW half

  /// Routes `params` (from collect_params) by `options`; throws naming the parameter for an MTP
  /// parameter routed to Muon, or a Muon-routed parameter that is not a 2-D Role::matrix.
  explicit Hybrid(std::vector<ParamRef<T, B>> params, HybridOptions options = {})
      : Hybrid(plan(std::move(params), std::move(options))) {}
  /// Routes every parameter of `model` (for_each_param; tied weights once).
  template <class Model>
    requires Module<Model, T, B>
  explicit Hybrid(Model& model, HybridOptions options = {})
      : Hybrid(collect_params<T, B>(model), std::move(options)) {}

  /// One update of both halves on this process alone.
  void step() {
    muon_.step();
    adamw_.step();
  }
  /// One update with Muon's Newton-Schulz work shared over `comm` (megacpp/dist/comm.hpp); AdamW is
  /// elementwise and runs on every rank (unsharded) or on each parameter's owner (ZeRO-1).
  template <class Comm>
    requires dist::GatherComm<Comm, T, B>
  void step(Comm& comm) {
    muon_.step(comm);
    adamw_.step(comm);
  }
  /// ZeRO-1: shards both halves' state over `world` ranks, this one being `rank` (Muon by its
  /// round-robin, AdamW by size-balanced ownership); step(comm) must then be given a
  /// communicator of that rank and size. world 1 leaves the state unsharded.
  void shard(int rank, int world) {
    muon_.shard(rank, world);
    adamw_.shard(rank, world);
  }
  /// Undoes shard() over `comm` (every rank then holds the whole state: for a checkpoint);
  /// collective.
  template <class Comm>
    requires dist::Comm<Comm, T, B>
  void unshard(Comm& comm) {
    muon_.unshard(comm);
    adamw_.unshard(comm);
  }
  /// Ranks the state is sharded over (1: unsharded).
  int shard_world() const { return adamw_.shard_world(); }
  /// The rank that updates parameter `name` when sharded (Muon's round-robin or AdamW's
  /// balanced owner; 0 when unsharded): the rank ZeRO-1's reduce-scatter gives its averaged
  /// gradient to (dist::DataParallelOptions::owners). Throws naming an unknown name.
  int owner(const std::string& name) const {
    if (muon_.owns(name)) return muon_.owner(name);
    check(adamw_.owns(name), "Hybrid::owner", "no parameter named '", name,
          "' (aliases are not accepted: use the first name in routing_table())");
    return adamw_.owner(name);
  }
  /// owner() of each of `params`, in order: DataParallelOptions::owners for ZeRO-1.
  std::vector<int> owners(const std::vector<ParamRef<T, B>>& params) const {
    std::vector<int> out;
    for (const ParamRef<T, B>& p : params) out.push_back(owner(p.name));
    return out;
  }
  /// Bytes of optimiser state (Muon momentum, AdamW moments) this rank holds.
  std::size_t state_bytes() const { return muon_.state_bytes() + adamw_.state_bytes(); }
  /// Bytes of optimiser state an unsharded optimiser holds.
  std::size_t unsharded_state_bytes() const { return muon_.unsharded_state_bytes() + adamw_.unsharded_state_bytes(); }
  /// Forgets every parameter's gradient.
  void zero_grad() {
    muon_.zero_grad();
    adamw_.zero_grad();
  }
  /// Multiplies every group's lr by `scale` (the LR schedule's value for the next step).
  void set_lr_scale(double scale) {
    muon_.set_lr_scale(scale);
    adamw_.set_lr_scale(scale);
  }
  /// Sets the Muon momentum (Muon momentum warmup, schedule.hpp).
  void set_muon_momentum(double m) { muon_.set_momentum(m); }

  /// Visits Muon's state, then AdamW's (names are unique: they carry the parameter name).
  template <class Visitor>
  void for_each_state(Visitor&& visit) {
    muon_.for_each_state(visit);
    adamw_.for_each_state(visit);
  }
  /// Zeroes the optimiser state of the named parameters, wherever they were routed (FIRE
  /// clears the state of exactly the re-initialised matrices); throws naming any unknown name
  /// before changing anything.
  void reset_state(const std::vector<std::string>& names) {
    std::vector<std::string> to_muon, to_adamw;
    for (const std::string& n : names) {
      if (muon_.owns(n)) to_muon.push_back(n);
      else if (adamw_.owns(n)) to_adamw.push_back(n);
      else fail("Hybrid::reset_state", "no parameter named '", n, "' (aliases are not accepted: use the first name in routing_table())");
    }
    muon_.reset_state(to_muon);
    adamw_.reset_state(to_adamw);
  }
  /// True when `name` is one of the routed parameters (first names only, not aliases).
  bool owns(const std::string& name) const { return muon_.owns(name) || adamw_.owns(name); }

  /// The routing decisions, in parameter order.
  const std::vector<RouteEntry>& routes() const { return routes_; }
  /// The routing table as text: one line per parameter (name, role, shape, optimiser, group, lr,
  /// weight decay), for training logs.
  std::string routing_table() const {
    std::size_t w_name = 9, w_group = 5;
    for (const RouteEntry& r : routes_) {
      w_name = std::max(w_name, display_name(r).size());
      w_group = std::max(w_group, r.group.size());
    }
    std::ostringstream out;
    out << "Hybrid routing: Muon<" << Coefficients::name << ", " << ShapeScale::name << "> for " << muon_.size()
        << " parameters, AdamW for " << adamw_.size() << "\n";
    const auto row = [&](std::string_view a, std::string_view b, std::string_view c, std::string_view d,
                         std::string_view e, std::string_view f, std::string_view g) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "  %-*.*s  %-9.*s  %-12.*s  %-5.*s  %-*.*s  %10.*s  %6.*s\n", static_cast<int>(w_name),
                    static_cast<int>(a.size()), a.data(), static_cast<int>(b.size()), b.data(), static_cast<int>(c.size()),
                    c.data(), static_cast<int>(d.size()), d.data(), static_cast<int>(w_group), static_cast<int>(e.size()),
                    e.data(), static_cast<int>(f.size()), f.data(), static_cast<int>(g.size()), g.data());
      out << buf;
    };
    row("parameter", "role", "shape", "optim", "group", "lr", "wd");
    for (const RouteEntry& r : routes_) {
      char lr[32], wd[32];
      std::snprintf(lr, sizeof lr, "%g", r.lr);
      std::snprintf(wd, sizeof wd, "%g", r.weight_decay);
      row(display_name(r), role_name(r.role), r.shape.to_string(), optimizer_name(r.optimizer), r.group, lr, wd);
    }
    return out.str();
  }

  /// The Muon half.
  MuonType& muon() { return muon_; }
  /// The AdamW half.
  AdamWType& adamw() { return adamw_; }
  /// Every routed parameter, in routing order (for clip_grad_norm).
  const std::vector<ParamRef<T, B>>& params() const { return params_; }

 private:
  struct Plan {
    std::vector<ParamRef<T, B>> params;
    std::vector<typename MuonType::Group> muon_groups;
    std::vector<typename AdamWType::Group> adamw_groups;
    std::vector<RouteEntry> routes;
  };

  explicit Hybrid(Plan p)
      : params_(std::move(p.params)), routes_(std::move(p.routes)), muon_(std::move(p.muon_groups)),
        adamw_(std::move(p.adamw_groups)) {}

  static std::string display_name(const RouteEntry& r) {
    std::string s = r.name;
    for (const std::string& a : r.aliases) s += " = " + a;
    return s;
  }

  static AdamWOptions adamw_options_for(const HybridOptions& o, Role role, bool decays) {
    AdamWOptions a = o.adamw;
    if (const auto it = o.adamw_by_role.find(role); it != o.adamw_by_role.end()) {
      const AdamWRoleOverride& r = it->second;
      if (r.lr) a.lr = *r.lr;
      if (r.beta1) a.beta1 = *r.beta1;
      if (r.beta2) a.beta2 = *r.beta2;
      if (r.eps) a.eps = *r.eps;
      if (r.weight_decay) a.weight_decay = *r.weight_decay;
    }
    if (!decays) a.weight_decay = 0.0;
    return a;
  }

  static Plan plan(std::vector<ParamRef<T, B>> params, HybridOptions o) {
    const auto route = o.route ? o.route : std::function<OptimizerKind(const std::string&, Role, const Shape&)>(default_route);
    const auto decays = o.decays ? o.decays : std::function<bool(const std::string&, Role, const Shape&)>(default_decays);
    // Group keys in order of first appearance: (optimiser, role, decays). Muon has one role.
    struct Key {
      OptimizerKind kind;
      Role role;
      bool decays;
    };
    std::vector<Key> keys;
    std::vector<std::size_t> key_of(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ParamRef<T, B>& p = params[i];
      const OptimizerKind kind = route(p.name, p.role, p.shape());
      if (kind == OptimizerKind::muon) {
        check(p.role != Role::mtp, "Hybrid", "parameter '", p.name,
              "' has Role::mtp and is routed to Muon: MTP parameters must be optimised by AdamW "
              "(docs/recipe.md \"Optimizers\"); fix HybridOptions::route");
        check(p.role == Role::matrix && p.shape().rank() == 2, "Hybrid", "parameter '", p.name, "' (Role::",
              role_name(p.role), ", shape ", p.shape(), ") is routed to Muon, which takes only 2-D Role::matrix parameters");
      }
      const Key key{kind, kind == OptimizerKind::muon ? Role::matrix : p.role, decays(p.name, p.role, p.shape())};
      std::size_t k = 0;
      while (k < keys.size() && !(keys[k].kind == key.kind && keys[k].role == key.role && keys[k].decays == key.decays)) ++k;
      if (k == keys.size()) keys.push_back(key);
      key_of[i] = k;
    }
    // A (kind, role) with both decaying and non-decaying members gets two named groups.
    const auto split = [&](const Key& key) {
      for (const Key& other : keys)
        if (other.kind == key.kind && other.role == key.role && other.decays != key.decays) return true;
      return false;
    };
    Plan out;
    std::vector<std::size_t> group_index(keys.size());
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const Key& key = keys[k];
      std::string name = key.kind == OptimizerKind::muon ? "muon" : "adamw." + std::string(role_name(key.role));
      if (split(key)) name += key.decays ? ".decay" : ".no_decay";
      if (key.kind == OptimizerKind::muon) {
        MuonOptions m = o.muon;
        if (!key.decays) m.weight_decay = 0.0;
        group_index[k] = out.muon_groups.size();
        out.muon_groups.push_back({name, m, {}});
      } else {
        group_index[k] = out.adamw_groups.size();
        out.adamw_groups.push_back({name, adamw_options_for(o, key.role, key.decays), {}});
      }
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Key& key = keys[key_of[i]];
      const std::size_t g = group_index[key_of[i]];
      RouteEntry e{params[i].name, params[i].aliases, params[i].role, params[i].shape(), key.kind, {}, 0, 0};
      if (key.kind == OptimizerKind::muon) {
        auto& group = out.muon_groups[g];
        group.params.push_back(params[i]);
        e.group = group.name;
        e.lr = group.options.lr;
        e.weight_decay = group.options.weight_decay;
      } else {
        auto& group = out.adamw_groups[g];
        group.params.push_back(params[i]);
        e.group = group.name;
        e.lr = group.options.lr;
        e.weight_decay = group.options.weight_decay;
      }
      out.routes.push_back(std::move(e));
    }
    out.params = std::move(params);
    return out;
  }

  std::vector<ParamRef<T, B>> params_;
  std::vector<RouteEntry> routes_;
  MuonType muon_;
  AdamWType adamw_;
};

}  // namespace megacpp::optim
