#include "compiler/lowering/sibling_gemms.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/lowering/small_m_gemm.h"
#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {

SiblingGemmScope sibling_gemm_scope() {
  const char* value = std::getenv("GROVE_FUSE_SIBLING_GEMMS");
  if (value == nullptr || std::string(value).empty()) {
    return SiblingGemmScope::kWideInferenceForward;
  }
  if (std::string(value) == "0") return SiblingGemmScope::kNone;
  GROVE_CHECK(std::string(value) == "1", "GROVE_FUSE_SIBLING_GEMMS=", value,
              "; use 1 (every group), 0 (none) or leave it unset (wide forward groups of "
              "inference on cuda)");
  return SiblingGemmScope::kAll;
}

bool sibling_gemm_fusion_enabled() { return sibling_gemm_scope() == SiblingGemmScope::kAll; }

namespace {

// Note [Gradient concats read the heads] below; on unless "0".
bool concat_sources_enabled() {
  const char* value = std::getenv("GROVE_SIBLING_CONCAT_SOURCES");
  if (value == nullptr || *value == '\0' || std::string(value) == "1") return true;
  GROVE_CHECK(std::string(value) == "0", "GROVE_SIBLING_CONCAT_SOURCES=", value, "; use 1 or 0");
  return false;
}

using ir::Attributes;
using ir::Program;
using ir::TensorType;
using ir::ValueId;

// A node of the rewritten program before it is added (dead ones are dropped).
struct NewNode {
  std::string name;
  std::string op;
  std::vector<int> operands;  // new value ids
  Attributes attrs;
  std::vector<std::string> result_names;
  std::vector<TensorType> result_types;
  std::vector<int> results;  // new value ids
  bool effects = false;
};

enum class GroupKind { kForward, kWeightGradient, kInputGradient, kBiasGradient };

struct Group {
  GroupKind kind;
  std::vector<int32_t> members;          // old node indices, in concat order
  int32_t trigger = -1;                  // the old node at whose place the fused GEMM is emitted
  std::vector<ValueId> concat_operands;  // forward: weights; gradients: the G_i
  std::vector<ValueId> weights;          // input gradient: the W_i
  std::vector<ValueId> biases;           // forward, where present
};

class Rewriter {
 public:
  Rewriter(const Program& in, SiblingGemmScope scope)
      : in_(in), scope_(scope), users_(in.values().size()) {
    for (int32_t n = 0; n < static_cast<int32_t>(in.nodes().size()); ++n) {
      for (ValueId operand : in.node(n).operands) users_[static_cast<size_t>(operand)].push_back(n);
    }
    for (ValueId output : in.outputs()) outputs_.insert(output);
  }

  std::optional<Program> run() {
    for (const ir::Node& node : in_.nodes()) {
      const ops::OpDef* def = ops::OpRegistry::global().find(node.op);
      if (def == nullptr || !def->effects.mutated_operands.empty() ||
          def->effects.host_side_effect) {
        return std::nullopt;
      }
    }
    if (scope_ == SiblingGemmScope::kNone) return std::nullopt;
    find_forward_groups();
    find_input_gradient_groups();
    find_weight_gradient_groups();
    find_bias_gradient_groups();
    if (scope_ == SiblingGemmScope::kWideInferenceForward) {
      // Note [Wide sibling GEMMs of inference on cuda].
      if (!in_.device().is_cuda()) return std::nullopt;
      for (const Group& group : groups_) {
        if (group.kind != GroupKind::kForward) return std::nullopt;  // a training program
      }
      std::erase_if(groups_, [&](const Group& group) { return !wide(group); });
      claimed_.clear();  // the members of the groups kept, as add_group claimed them
      for (const Group& group : groups_)
        claimed_.insert(group.members.begin(), group.members.end());
    }
    if (groups_.empty()) return std::nullopt;
    if (!emit()) return std::nullopt;
    return build();
  }

 private:
  const TensorType& type(ValueId v) const { return in_.value(v).type; }

  const ir::Node* producer(ValueId v) const {
    const ir::Value& value = in_.value(v);
    return value.kind == ir::ValueKind::kNodeResult ? &in_.node(value.producer) : nullptr;
  }
  bool is_input(ValueId v) const { return in_.value(v).is_program_input(); }
  bool read_once(ValueId v) const {
    return users_[static_cast<size_t>(v)].size() == 1 && outputs_.count(v) == 0;
  }
  // The value `v` reshapes (through chains of reshapes).
  ValueId source(ValueId v) const {
    for (const ir::Node* node = producer(v); node != nullptr && node->op == "reshape";
         node = producer(v)) {
      v = node->operands[0];
    }
    return v;
  }
  // The operand of a rank-2 transpose (or permute [1, 0]) that produced `v`, or kNoValue.
  ValueId transposed(ValueId v) const {
    const ir::Node* node = producer(v);
    if (node == nullptr || type(v).rank() != 2) return ir::kNoValue;
    if (node->op == "permute") {  // AOTAutograd's saved weight transposes
      return node->attrs.get_ints("order") == std::vector<int64_t>{1, 0} ? node->operands[0]
                                                                         : ir::kNoValue;
    }
    if (node->op != "transpose") return ir::kNoValue;
    int64_t d0 = node->attrs.get_int("dim0"), d1 = node->attrs.get_int("dim1");
    if (d0 < 0) d0 += 2;
    if (d1 < 0) d1 += 2;
    return d0 != d1 ? node->operands[0] : ir::kNoValue;
  }
  bool floating_2d(ValueId v) const {
    const TensorType& t = type(v);
    return t.rank() == 2 && !t.has_dynamic_dims() &&
           (t.dtype == runtime::DType::kF32 || t.dtype == runtime::DType::kBF16 ||
            t.dtype == runtime::DType::kF16);
  }

  // Note [Wide sibling GEMMs of inference on cuda]: x of more than
  // kMaxMeasuredSmallM rows, weights of at most kMaxWideSiblingWeightBytes together.
  bool wide(const Group& group) const {
    const TensorType& x = type(in_.node(group.members.front()).operands[0]);
    int64_t weight_bytes = 0;
    for (ValueId weight : group.concat_operands) {
      weight_bytes += runtime::shape_numel(type(weight).shape) *
                      static_cast<int64_t>(runtime::dtype_size(type(weight).dtype));
    }
    return x.shape[0] > kMaxMeasuredSmallM && weight_bytes <= kMaxWideSiblingWeightBytes;
  }

  void add_group(Group group) {
    for (int32_t member : group.members) claimed_.insert(member);
    groups_.push_back(std::move(group));
  }

  // linear(x, W_i, b_i) over one x's contents, W_i and b_i program inputs.
  void find_forward_groups() {
    std::map<std::tuple<ValueId, std::vector<int64_t>, bool>, std::vector<int32_t>> by_input;
    for (int32_t n = 0; n < static_cast<int32_t>(in_.nodes().size()); ++n) {
      const ir::Node& node = in_.node(n);
      if (node.op != "linear" || !floating_2d(node.operands[0]) || !is_input(node.operands[1])) {
        continue;
      }
      const bool bias = node.operands.size() == 3;
      if (bias && !is_input(node.operands[2])) continue;
      if (type(node.operands[1]).dtype != type(node.operands[0]).dtype) continue;
      ValueId x = node.operands[0];
      by_input[{source(x), type(x).shape, bias}].push_back(n);
    }
    for (auto& [key, members] : by_input) {
      if (members.size() < 2) continue;
      Group group{GroupKind::kForward, members, members.front()};
      for (int32_t member : members) {
        group.concat_operands.push_back(in_.node(member).operands[1]);
        if (std::get<2>(key)) group.biases.push_back(in_.node(member).operands[2]);
      }
      add_group(std::move(group));
    }
  }

  // The leaves of an add tree rooted at `add` (see the Note), or empty.
  bool collect_leaves(const ir::Node& add, std::vector<int32_t>& leaves,
                      std::vector<int32_t>& interior) const {
    const TensorType& result = type(add.results[0]);
    for (ValueId operand : add.operands) {
      if (runtime::shape_numel(type(operand).shape) != runtime::shape_numel(result.shape) ||
          type(operand).dtype != result.dtype) {
        return false;
      }
      ValueId v = operand;
      if (!read_once(v)) return false;
      while (producer(v) != nullptr && producer(v)->op == "reshape") {
        v = producer(v)->operands[0];
        if (!read_once(v)) return false;
      }
      const ir::Node* node = producer(v);
      if (node == nullptr) return false;
      const int32_t index = in_.value(v).producer;
      if (node->op == "add") {
        interior.push_back(index);
        if (!collect_leaves(*node, leaves, interior)) return false;
        continue;
      }
      if (node->op != "linear" || node->operands.size() != 2 || !floating_2d(node->operands[0])) {
        return false;
      }
      ValueId weight = transposed(node->operands[1]);
      if (weight == ir::kNoValue || !is_input(weight)) return false;
      leaves.push_back(index);
    }
    return true;
  }

  // The forward group whose weights are exactly `weights` (any order), or null.
  const Group* forward_group_of(const std::vector<ValueId>& weights) const {
    std::set<ValueId> wanted(weights.begin(), weights.end());
    for (const Group& group : groups_) {
      if (group.kind != GroupKind::kForward) continue;
      std::set<ValueId> have(group.concat_operands.begin(), group.concat_operands.end());
      if (have == wanted && wanted.size() == weights.size()) return &group;
    }
    return nullptr;
  }

  void find_input_gradient_groups() {
    std::set<int32_t> interior_of_a_root;
    for (int32_t n = static_cast<int32_t>(in_.nodes().size()) - 1; n >= 0; --n) {
      const ir::Node& node = in_.node(n);
      if (node.op != "add" || node.operands.size() != 2 || interior_of_a_root.count(n)) continue;
      std::vector<int32_t> leaves, interior;
      if (!collect_leaves(node, leaves, interior) || leaves.size() < 2) continue;
      const TensorType& first = type(in_.node(leaves[0]).results[0]);
      bool same = true;
      for (int32_t leaf : leaves) {
        const TensorType& t = type(in_.node(leaf).results[0]);
        same = same && t.shape == first.shape && t.dtype == first.dtype;
      }
      if (!same) continue;
      for (int32_t i : interior) interior_of_a_root.insert(i);
      std::sort(leaves.begin(), leaves.end());
      std::vector<ValueId> weights;
      for (int32_t leaf : leaves) weights.push_back(transposed(in_.node(leaf).operands[1]));
      // In the forward's order where these are one forward group's weights,
      // so that the forward's weight concat is reused.
      if (const Group* forward = forward_group_of(weights)) {
        std::vector<int32_t> ordered;
        for (ValueId w : forward->concat_operands) {
          for (int32_t leaf : leaves) {
            if (transposed(in_.node(leaf).operands[1]) == w) ordered.push_back(leaf);
          }
        }
        leaves = ordered;
      }
      Group group{GroupKind::kInputGradient, leaves, n};
      for (int32_t leaf : leaves) {
        group.concat_operands.push_back(in_.node(leaf).operands[0]);
        group.weights.push_back(transposed(in_.node(leaf).operands[1]));
      }
      groups_.push_back(std::move(group));  // the leaves are copied, then dead
    }
  }

  // matmul(transpose(G_i), X) over one X's contents.
  void find_weight_gradient_groups() {
    std::map<std::pair<ValueId, std::vector<int64_t>>, std::vector<int32_t>> by_operand;
    for (int32_t n = 0; n < static_cast<int32_t>(in_.nodes().size()); ++n) {
      const ir::Node& node = in_.node(n);
      if (node.op != "matmul" || !floating_2d(node.operands[0]) || !floating_2d(node.operands[1])) {
        continue;
      }
      ValueId g = transposed(node.operands[0]);
      if (g == ir::kNoValue || !floating_2d(g)) continue;
      ValueId x = node.operands[1];
      by_operand[{source(x), type(x).shape}].push_back(n);
    }
    for (auto& [key, members] : by_operand) {
      if (members.size() < 2) continue;
      std::vector<ValueId> gs;
      for (int32_t member : members) gs.push_back(transposed(in_.node(member).operands[0]));
      // In an input-gradient group's order where the G_i are the same, so
      // both GEMMs read one concat.
      for (const Group& other : groups_) {
        if (other.kind != GroupKind::kInputGradient ||
            std::set<ValueId>(other.concat_operands.begin(), other.concat_operands.end()) !=
                std::set<ValueId>(gs.begin(), gs.end()) ||
            other.concat_operands.size() != gs.size()) {
          continue;
        }
        std::vector<int32_t> ordered;
        for (ValueId g : other.concat_operands) {
          for (int32_t member : members) {
            if (transposed(in_.node(member).operands[0]) == g) ordered.push_back(member);
          }
        }
        gs = other.concat_operands;
        members = ordered;
        break;
      }
      const int32_t last = *std::max_element(members.begin(), members.end());
      Group group{GroupKind::kWeightGradient, members, last};
      group.concat_operands = gs;
      add_group(std::move(group));
    }
  }

  // sum(G_i, {0}) of every G_i of a gradient group: one sum over their concat.
  void find_bias_gradient_groups() {
    std::set<std::vector<ValueId>> seen;
    const size_t count = groups_.size();
    for (size_t g = 0; g < count; ++g) {
      const Group gradients = groups_[g];  // copied: add_group grows groups_
      if (gradients.kind == GroupKind::kForward || !seen.insert(gradients.concat_operands).second) {
        continue;
      }
      std::vector<int32_t> sums;
      std::optional<int64_t> keepdim;
      for (ValueId gradient : gradients.concat_operands) {
        for (int32_t user : users_[static_cast<size_t>(gradient)]) {
          const ir::Node& node = in_.node(user);
          if (node.op != "sum" || claimed_.count(user) ||
              node.attrs.get_ints("dims") != std::vector<int64_t>{0}) {
            continue;
          }
          const int64_t kept = node.attrs.has("keepdim") ? node.attrs.get_int("keepdim") : 0;
          if (keepdim && *keepdim != kept) continue;
          keepdim = kept;
          sums.push_back(user);
          break;
        }
      }
      if (sums.size() != gradients.concat_operands.size()) continue;
      Group group{GroupKind::kBiasGradient, sums, *std::max_element(sums.begin(), sums.end())};
      group.concat_operands = gradients.concat_operands;
      add_group(std::move(group));
    }
  }

  // ---- emission ----

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 2; in_.has_name(name) || in_.find_node(name) || taken_.count(name); ++i)
      name = str_cat(base, ".", i);
    taken_.insert(name);
    return name;
  }

  int new_value() { return next_value_++; }

  // Appends a node of one result; returns the result's new id.
  int add(const std::string& name, const std::string& op, std::vector<int> operands,
          Attributes attrs, TensorType result_type) {
    NewNode node{fresh(name), op, std::move(operands), std::move(attrs), {}, {}, {}};
    node.result_names.push_back(fresh(node.name + ".out"));
    node.result_types.push_back(std::move(result_type));
    const int result = new_value();
    node.results.push_back(result);
    types_[result] = node.result_types.back();
    nodes_.push_back(std::move(node));
    return result;
  }

  const TensorType& new_type(int v) const { return types_.at(v); }

  int concat(const std::string& name, const std::vector<ValueId>& parts, int64_t dim) {
    std::vector<int> operands;
    for (ValueId part : parts) operands.push_back(map_.at(part));
    auto key = std::make_pair(dim, operands);
    auto found = concats_.find(key);
    if (found != concats_.end()) return found->second;
    if (std::optional<int> joined = concat_of_sources(name, parts, dim)) {
      concats_[key] = *joined;
      return *joined;
    }
    const int value = plain_concat(name, operands, dim);
    concats_[key] = value;
    return value;
  }

  int plain_concat(const std::string& name, const std::vector<int>& operands, int64_t dim) {
    TensorType result = new_type(operands[0]);
    result.shape[static_cast<size_t>(dim)] = 0;
    for (int operand : operands) {
      result.shape[static_cast<size_t>(dim)] += new_type(operand).shape[static_cast<size_t>(dim)];
    }
    return add(name, "concat", operands, Attributes{{"dim", int64_t{dim}}}, result);
  }

  // Note [Gradient concats read the heads]: the G_i of an attention block are
  // reshapes [rows, width] of its heads laid out [batch, time, heads, head
  // size] through a transpose, so each reshape is a copy. Joined along the
  // columns they are the concat of those sources along the first dim of the
  // columns' split (heads), reshaped: one kernel reads the transposed heads,
  // and the copies go (GROVE_SIBLING_CONCAT_SOURCES=0 keeps them).
  std::optional<int> concat_of_sources(const std::string& name, const std::vector<ValueId>& parts,
                                       int64_t dim) {
    if (dim != 1 || !concat_sources_enabled()) return std::nullopt;
    const TensorType& first = type(parts[0]);
    const runtime::Shape& shape = type(source(parts[0])).shape;
    std::vector<int> sources;
    for (ValueId part : parts) {
      const ValueId from = source(part);
      if (from == part || type(from).shape != shape || type(part).shape != first.shape) {
        return std::nullopt;
      }
      sources.push_back(map_.at(from));
    }
    size_t split = 0;
    for (int64_t rows = 1; split < shape.size() && rows < first.shape[0]; ++split) {
      rows *= shape[split];
    }
    if (split == 0 || split >= shape.size() ||
        runtime::shape_numel(runtime::Shape(shape.begin(), shape.begin() + split)) !=
            first.shape[0]) {
      return std::nullopt;
    }
    const int joined = plain_concat(name, sources, static_cast<int64_t>(split));
    TensorType result = first;
    result.shape[1] *= static_cast<int64_t>(parts.size());
    return add(str_cat(name, ".rows"), "reshape", {joined},
               Attributes{{"shape", std::vector<int64_t>(result.shape)}}, result);
  }

  int transpose(const std::string& name, int operand) {
    TensorType result = new_type(operand);
    std::swap(result.shape[0], result.shape[1]);
    return add(name, "transpose", {operand}, Attributes{{"dim0", int64_t{0}}, {"dim1", int64_t{1}}},
               result);
  }

  // Maps each member's result to its slice of `fused` along `dim`.
  void slice_results(const Group& group, int fused, int64_t dim, const std::string& name) {
    int64_t start = 0;
    for (int32_t member : group.members) {
      const ValueId result = in_.node(member).results[0];
      const int64_t size = type(result).shape[static_cast<size_t>(dim)];
      TensorType sliced = new_type(fused);
      sliced.shape[static_cast<size_t>(dim)] = size;
      map_[result] =
          add(str_cat(name, ".slice"), "slice", {fused},
              Attributes{
                  {"dim", int64_t{dim}}, {"start", int64_t{start}}, {"end", int64_t{start + size}}},
              sliced);
      start += size;
    }
  }

  void emit_group(const Group& group) {
    const ir::Node& trigger = in_.node(group.trigger);
    const std::string base = str_cat(trigger.name, ".siblings");
    switch (group.kind) {
      case GroupKind::kForward: {
        const ir::Node& first = in_.node(group.members.front());
        std::vector<int> operands = {map_.at(first.operands[0]),
                                     concat(str_cat(base, ".weights"), group.concat_operands, 0)};
        if (!group.biases.empty())
          operands.push_back(concat(str_cat(base, ".biases"), group.biases, 0));
        TensorType result = type(first.results[0]);
        result.shape[1] = new_type(operands[1]).shape[0];
        const int fused = add(str_cat(base, ".linear"), "linear", operands, {}, result);
        slice_results(group, fused, 1, base);
        return;
      }
      case GroupKind::kWeightGradient: {
        const int gradients = concat(str_cat(base, ".gradients"), group.concat_operands, 1);
        const int x = map_.at(trigger.operands[1]);
        TensorType result = new_type(x);
        result.shape[0] = new_type(gradients).shape[1];
        const int fused = add(str_cat(base, ".matmul"), "matmul",
                              {transpose(str_cat(base, ".transpose"), gradients), x}, {}, result);
        slice_results(group, fused, 0, base);
        return;
      }
      case GroupKind::kBiasGradient: {
        const int gradients = concat(str_cat(base, ".gradients"), group.concat_operands, 1);
        const int64_t keepdim = trigger.attrs.has("keepdim") ? trigger.attrs.get_int("keepdim") : 0;
        TensorType result = new_type(gradients);
        result.shape =
            keepdim ? runtime::Shape{1, result.shape[1]} : runtime::Shape{result.shape[1]};
        const int fused =
            add(str_cat(base, ".sum"), "sum", {gradients},
                Attributes{{"dims", std::vector<int64_t>{0}}, {"keepdim", keepdim}}, result);
        slice_results(group, fused, keepdim ? 1 : 0, base);
        return;
      }
      case GroupKind::kInputGradient: {
        const int gradients = concat(str_cat(base, ".gradients"), group.concat_operands, 1);
        const int weights = concat(str_cat(base, ".weights"), group.weights, 0);
        TensorType result = type(in_.node(group.members.front()).results[0]);
        const int fused =
            add(str_cat(base, ".linear"), "linear",
                {gradients, transpose(str_cat(base, ".transpose"), weights)}, {}, result);
        const TensorType& sum = type(trigger.results[0]);
        map_[trigger.results[0]] =
            sum.shape == result.shape
                ? fused
                : add(str_cat(base, ".reshape"), "reshape", {fused},
                      Attributes{{"shape", std::vector<int64_t>(sum.shape)}}, sum);
        return;
      }
    }
  }

  bool ready(const ir::Node& node) const {
    return std::all_of(node.operands.begin(), node.operands.end(),
                       [&](ValueId v) { return map_.count(v) != 0; });
  }

  bool group_ready(const Group& group) const {
    auto mapped = [&](ValueId v) { return map_.count(v) != 0; };
    const ir::Node& trigger = in_.node(group.trigger);
    if (group.kind == GroupKind::kForward) {
      return mapped(in_.node(group.members.front()).operands[0]);
    }
    if (group.kind == GroupKind::kWeightGradient && !mapped(trigger.operands[1])) return false;
    return std::all_of(group.concat_operands.begin(), group.concat_operands.end(), mapped);
  }

  void copy_node(const ir::Node& node) {
    NewNode copy{node.name, node.op, {}, node.attrs, {}, {}, {}};
    for (ValueId operand : node.operands) copy.operands.push_back(map_.at(operand));
    for (ValueId result : node.results) {
      const int id = new_value();
      copy.result_names.push_back(in_.value(result).name);
      copy.result_types.push_back(type(result));
      copy.results.push_back(id);
      types_[id] = type(result);
      map_[result] = id;
    }
    nodes_.push_back(std::move(copy));
  }

  // One old node: its group's fused form at the trigger, nothing for the
  // other members of forward and weight-gradient groups (their results are
  // slices), a copy otherwise. False where its operands are not there yet.
  bool place(int32_t n) {
    auto trigger = triggers_.find(n);
    if (trigger != triggers_.end()) {
      if (!group_ready(groups_[trigger->second])) return false;
      emit_group(groups_[trigger->second]);
      return true;
    }
    if (claimed_.count(n)) return true;
    if (!ready(in_.node(n))) return false;
    copy_node(in_.node(n));
    return true;
  }

  bool emit() {
    for (ValueId input : in_.inputs()) {
      const int id = new_value();
      map_[input] = id;
      types_[id] = type(input);
    }
    for (size_t g = 0; g < groups_.size(); ++g) triggers_[groups_[g].trigger] = g;
    std::vector<int32_t> waiting;
    for (int32_t n = 0; n < static_cast<int32_t>(in_.nodes().size()); ++n) {
      if (!place(n)) {
        waiting.push_back(n);
        continue;
      }
      for (bool placed = true; placed && !waiting.empty();) {
        placed = false;
        for (size_t i = 0; i < waiting.size(); ++i) {
          if (place(waiting[i])) {
            waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
            placed = true;
            break;
          }
        }
      }
    }
    // A group whose operands come from another member's result waits on
    // itself: the program is left alone.
    return waiting.empty();
  }

  Program build() const {
    // Live nodes: those that reach an output (nothing here has effects).
    std::vector<int> producer_of(static_cast<size_t>(next_value_), -1);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (int r : nodes_[i].results) producer_of[static_cast<size_t>(r)] = static_cast<int>(i);
    }
    std::vector<bool> live(nodes_.size(), false);
    std::vector<int> work;
    for (ValueId output : in_.outputs()) work.push_back(map_.at(output));
    while (!work.empty()) {
      const int v = work.back();
      work.pop_back();
      const int p = producer_of[static_cast<size_t>(v)];
      if (p < 0 || live[static_cast<size_t>(p)]) continue;
      live[static_cast<size_t>(p)] = true;
      for (int operand : nodes_[static_cast<size_t>(p)].operands) work.push_back(operand);
    }
    Program out(in_.name(), in_.device());
    out.set_dims(in_.dims());
    std::vector<ValueId> ids(static_cast<size_t>(next_value_), ir::kNoValue);
    for (ValueId input : in_.inputs()) {
      const ir::Value& value = in_.value(input);
      ids[static_cast<size_t>(map_.at(input))] =
          out.add_input(value.name, value.type, value.kind, value.initializer);
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!live[i]) continue;
      const NewNode& node = nodes_[i];
      std::vector<ValueId> operands;
      for (int operand : node.operands) operands.push_back(ids[static_cast<size_t>(operand)]);
      const int32_t index = out.add_node(node.name, node.op, operands, node.attrs,
                                         node.result_names, node.result_types);
      for (size_t r = 0; r < node.results.size(); ++r) {
        ids[static_cast<size_t>(node.results[r])] = out.node(index).results[r];
      }
    }
    std::vector<ValueId> outputs;
    for (ValueId output : in_.outputs())
      outputs.push_back(ids[static_cast<size_t>(map_.at(output))]);
    out.set_outputs(outputs);
    return out;
  }

  const Program& in_;
  const SiblingGemmScope scope_;
  std::vector<std::vector<int32_t>> users_;
  std::set<ValueId> outputs_;
  std::vector<Group> groups_;
  std::set<int32_t> claimed_;  // members emitted by their group, not copied
  std::map<int32_t, size_t> triggers_;
  std::map<ValueId, int> map_;  // old value -> new value
  std::map<int, TensorType> types_;
  std::map<std::pair<int64_t, std::vector<int>>, int> concats_;
  std::vector<NewNode> nodes_;
  std::set<std::string> taken_;
  int next_value_ = 0;
};

}  // namespace

std::optional<ir::Program> fuse_sibling_gemms(const ir::Program& program, SiblingGemmScope scope) {
  return Rewriter(program, scope).run();
}

}  // namespace grove::compiler::lowering
