#include "compiler/lowering/lowering_graph.h"

#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace grove::compiler::lowering {

bool LoweringNode::in_place() const {
  for (int operand : in_place_operand) {
    if (operand >= 0) return true;
  }
  return false;
}

namespace {

NodeClass classify(const ops::OpDef& def) {
  switch (def.kind) {
    case ops::OpKind::kElementwise:
    case ops::OpKind::kCopyUpdate:
    case ops::OpKind::kRandom:
      return NodeClass::kPointwise;
    case ops::OpKind::kReduction:
      return NodeClass::kReduction;
    case ops::OpKind::kView:
      return NodeClass::kView;
    case ops::OpKind::kMatmul:
      return NodeClass::kGemm;
    case ops::OpKind::kGather:
      return def.name == "embedding" ? NodeClass::kPointwise : NodeClass::kConcat;
    case ops::OpKind::kSpecial:
      return NodeClass::kHost;
  }
  return NodeClass::kHost;
}

}  // namespace

bool gemm_epilogues_enabled() {
  const char* value = std::getenv("GROVE_GEMM_EPILOGUES");
  if (value == nullptr || *value == '\0') return true;
  const std::string text = value;
  GROVE_CHECK_AS(ConfigError, text == "0" || text == "1", "GROVE_GEMM_EPILOGUES='", text,
                 "': expected 1 (fuse bias and gelu into GEMMs, the default) or 0 (do not)");
  return text == "1";
}

int LoweringGraph::add_value(LoweringValue value) {
  values_.push_back(std::move(value));
  uses_.emplace_back();
  return static_cast<int>(values_.size()) - 1;
}

int LoweringGraph::add_node(LoweringNode node) {
  int index = static_cast<int>(nodes_.size());
  for (size_t k = 0; k < node.operands.size(); ++k) {
    uses_[static_cast<size_t>(node.operands[k])].emplace_back(index, static_cast<int>(k));
  }
  for (int result : node.results) values_[static_cast<size_t>(result)].producer = index;
  nodes_.push_back(std::move(node));
  return index;
}

LoweringGraph::LoweringGraph(const ir::Program& program) : program_(program) {
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  std::vector<int> id_of(program.values().size(), -1);
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    const ir::Value& value = program.value(program.inputs()[i]);
    LoweringValue lowered{value.name, value.type, value.kind, -1, static_cast<int>(i), false};
    id_of[static_cast<size_t>(value.id)] = add_value(lowered);
    inputs_.push_back(id_of[static_cast<size_t>(value.id)]);
  }
  // IR uses per value (node indices) and program outputs, for epilogue fusion.
  std::vector<std::vector<size_t>> ir_users(program.values().size());
  for (size_t n = 0; n < program.nodes().size(); ++n) {
    for (ir::ValueId operand : program.nodes()[n].operands) {
      ir_users[static_cast<size_t>(operand)].push_back(n);
    }
  }
  std::vector<bool> ir_output(program.values().size(), false);
  for (ir::ValueId output : program.outputs()) ir_output[static_cast<size_t>(output)] = true;
  const bool epilogues = gemm_epilogues_enabled();
  std::vector<bool> absorbed(program.nodes().size(), false);

  for (size_t node_index = 0; node_index < program.nodes().size(); ++node_index) {
    if (absorbed[node_index]) continue;
    const ir::Node& node = program.nodes()[node_index];
    const ops::OpDef& def = registry.get(node.op);
    LoweringNode lowered;
    lowered.node_class = classify(def);
    lowered.name = node.name;
    lowered.op = node.op;
    lowered.def = &def;
    lowered.context.node_name = node.name;
    lowered.context.op = node.op;
    lowered.context.device = program.device();
    for (ir::ValueId operand : node.operands) {
      const ir::Value& value = program.value(operand);
      lowered.context.operand_types.push_back(value.type);
      lowered.context.operand_names.push_back(value.name);
      int id = id_of[static_cast<size_t>(operand)];
      GROVE_CHECK(id >= 0, "lowering: node '", node.name, "' reads '", value.name,
                  "' before it is defined; run Program::verify()");
      lowered.operands.push_back(id);
    }
    lowered.context.attrs = registry.normalize_attrs(lowered.context, node.attrs);
    if (node.op == "embedding") lowered.pointwise = PointwiseKind::kEmbedding;
    if (node.op == "dropout") lowered.pointwise = PointwiseKind::kDropout;

    std::vector<int> results;
    for (ir::ValueId result : node.results) {
      const ir::Value& value = program.value(result);
      int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
      id_of[static_cast<size_t>(result)] = id;
      results.push_back(id);
    }
    if (lowered.node_class == NodeClass::kPointwise) {
      lowered.in_place_operand.assign(results.size(), -1);
      if (def.kind == ops::OpKind::kCopyUpdate) {
        for (size_t r = 0; r < results.size() && r < def.effects.result_aliases.size(); ++r) {
          if (def.effects.result_aliases[r]) {
            lowered.in_place_operand[r] = *def.effects.result_aliases[r];
          }
        }
      }
    }

    bool split_bias = node.op == "linear" && node.operands.size() == 3;
    if (split_bias && epilogues) {
      // Note [GEMM epilogues in lowering].
      const ir::TensorType& result_type = values_[static_cast<size_t>(results[0])].type;
      const ir::TensorType& bias_type = lowered.context.operand_types[2];
      const runtime::DType dtype = result_type.dtype;
      bool gemm_dtype = dtype == runtime::DType::kF32 || dtype == runtime::DType::kBF16 ||
                        dtype == runtime::DType::kF16;
      if (gemm_dtype && bias_type.dtype == dtype && !result_type.shape.empty() &&
          bias_type.shape == ir::Shape{result_type.shape.back()} &&
          !result_type.has_dynamic_dims()) {
        lowered.transpose_b = true;
        lowered.epilogue = runtime::GemmEpilogue::kBias;
        lowered.results = results;
        const ir::ValueId linear_result = node.results[0];
        const std::vector<size_t>& users = ir_users[static_cast<size_t>(linear_result)];
        if (users.size() == 1 && program.nodes()[users[0]].op == "gelu" &&
            !ir_output[static_cast<size_t>(linear_result)]) {
          // The GEMM yields the gelu's result; the linear's own value never exists.
          const ir::Node& gelu = program.nodes()[users[0]];
          const ir::Value& value = program.value(gelu.results[0]);
          values_.pop_back();
          uses_.pop_back();
          id_of[static_cast<size_t>(linear_result)] = -1;
          int id = add_value(LoweringValue{value.name, value.type, value.kind, -1, -1, false});
          id_of[static_cast<size_t>(gelu.results[0])] = id;
          lowered.results = {id};
          lowered.epilogue = runtime::GemmEpilogue::kBiasGelu;
          absorbed[users[0]] = true;
        }
        add_node(std::move(lowered));
        continue;
      }
    }
    if (!split_bias) {
      lowered.results = results;
      lowered.transpose_b = node.op == "linear";
      add_node(std::move(lowered));
      continue;
    }
    // linear(x, w, b) = add(gemm(x, w^T), b): the add is an ordinary pointwise
    // node, so it fuses with the elementwise work after it.
    const ir::TensorType result_type = values_[static_cast<size_t>(results[0])].type;
    int product =
        add_value(LoweringValue{node.name + ".product", result_type, ir::ValueKind::kNodeResult});
    LoweringNode gemm = lowered;
    gemm.operands.pop_back();
    gemm.context.operand_types.pop_back();
    gemm.context.operand_names.pop_back();
    gemm.results = {product};
    gemm.transpose_b = true;
    add_node(std::move(gemm));

    LoweringNode bias;
    bias.node_class = NodeClass::kPointwise;
    bias.name = node.name;
    bias.op = "add";
    bias.def = &registry.get("add");
    bias.context.node_name = node.name;
    bias.context.op = "add";
    bias.context.device = program.device();
    bias.context.operand_types = {result_type, lowered.context.operand_types[2]};
    bias.context.operand_names = {node.name + ".product", lowered.context.operand_names[2]};
    bias.operands = {product, lowered.operands[2]};
    bias.results = results;
    bias.in_place_operand = {-1};
    add_node(std::move(bias));
  }
  for (ir::ValueId output : program.outputs()) {
    int id = id_of[static_cast<size_t>(output)];
    values_[static_cast<size_t>(id)].is_output = true;
    outputs_.push_back(id);
  }
}

}  // namespace grove::compiler::lowering
